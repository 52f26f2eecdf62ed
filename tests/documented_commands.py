"""The commands the pages show: every ``vaswani …`` command line in the ```bash blocks of README.md, results/README.md
and docs/*.md, as the command line gets it, with what the shell hands it (variables set in front of it, the text
``echo`` pipes into it) and the error the page prints under it. test_docs.py parses each one; test_docs_run.py runs
them."""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", ROOT / "results" / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
# The comment a page prints under a command that fails: "# vaswani train: error: …", continued on "#   …" lines.
ERROR_COMMENT = re.compile(r"#\s*vaswani [\w-]+: error: (.*)")


# Programs whose lines in a block prepare what the block's next vaswani command shows (a file damaged by hand
# before the error it gives): run by test_docs_run.py in the command's folder, before the command.
SETUP_PROGRAMS = ("sed", "printf", "dd")


@dataclass(frozen=True)
class SimpleCommand:
    """One simple command of a shell line: its words, its first and last line, the command piped into it, the line
    of its block's opening fence and its whole source line."""

    line: int
    end: int
    words: list[str]
    piped_from: list[str] | None
    block: int
    source: str


@dataclass(frozen=True)
class DocumentedCommand:
    """A ``vaswani`` command line as a page shows it."""

    page: Path
    line: int
    args: tuple[str, ...]  # what the ``vaswani`` command line gets
    environment: tuple[tuple[str, str], ...]  # NAME=value words in front of it
    stdin: str | None  # what ``echo "…" |`` pipes into it
    error: str | None  # the error the page shows under it, whitespace collapsed
    # what the block does before it, when the block damages a file by hand (SETUP_PROGRAMS): each earlier vaswani
    # command as a DocumentedCommand, each setup line as its source text, in the block's order
    prelude: tuple[DocumentedCommand | str, ...] = ()

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"

    @property
    def text(self) -> str:
        return shlex.join(["vaswani", *self.args])


def shell_commands(page: Path) -> list[SimpleCommand]:
    """Every simple command in the page's ```bash blocks: split at |, &&, ; and &, comments gone; a line ending in a
    backslash goes on in the next one."""
    found: list[SimpleCommand] = []
    in_bash, pending, start, block = False, "", 0, 0
    for number, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1):
        if line.startswith("```"):
            in_bash, block = line.strip() == "```bash", number
            continue
        if not in_bash:
            continue
        if not pending:
            start = number
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        line, pending = pending + line, ""
        lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
        lexer.whitespace_split = True
        words: list[str] = []
        previous: list[str] | None = None
        for word in [*lexer, "&&"]:
            if word in ("|", "&&", ";", "||", "&"):
                if words:
                    found.append(SimpleCommand(start, number, words, previous, block, line))
                previous = words if word == "|" else None
                words = []
            else:
                words.append(word)
    return found


def error_comments(page: Path) -> dict[int, str]:
    """{last line of a command: the error the page prints under it}, from the comment lines that follow it."""
    lines = page.read_text(encoding="utf-8").splitlines()
    errors: dict[int, str] = {}
    for index, line in enumerate(lines):
        match = ERROR_COMMENT.fullmatch(line.strip())
        if not match:
            continue
        command = index - 1  # the comment follows its command: 0-based index of the command's line
        while command >= 0 and lines[command].lstrip().startswith("#"):
            command -= 1
        text = [match.group(1)]
        for more in lines[index + 1 :]:
            if not more.startswith("#  ") or ERROR_COMMENT.fullmatch(more.strip()):
                break
            text.append(more.lstrip("# "))
        errors[command + 1] = " ".join(" ".join(text).split())
    return errors


def vaswani_arguments(words: list[str]) -> tuple[list[str], list[tuple[str, str]]] | None:
    """(the arguments the ``vaswani`` command line gets from one shell command, the variables set in front of it),
    or None for another program."""
    environment: list[tuple[str, str]] = []
    while words and re.fullmatch(r"[A-Z_][A-Z0-9_]*=\S*", words[0]):  # VASWANI_DATA=... vaswani ...
        name, _, value = words[0].partition("=")
        environment.append((name, value))
        words = words[1:]
    if words[:1] == ["nohup"]:
        words = words[1:]
    if words[:1] == ["vaswani"]:
        return words[1:], environment
    for entry in ("vaswani", "vaswani.cli"):  # python -m vaswani …, torchrun … -m vaswani.cli …
        for i in range(len(words) - 1):
            if words[i] == "-m" and words[i + 1] == entry and words[0] in ("python", "torchrun"):
                return words[i + 2 :], environment
    return None


def piped_text(words: list[str] | None) -> str | None:
    """The text ``echo …`` writes into a pipe, or None for no pipe or another program."""
    if not words or words[0] != "echo":
        return None
    return " ".join(words[1:]) + "\n"


def documented_commands(pages: list[Path] = PAGES) -> list[DocumentedCommand]:
    """Every ``vaswani`` command line of the pages, in page order."""
    found = []
    for page in pages:
        errors = error_comments(page)
        block: list[DocumentedCommand | str] = []  # what the block holds so far: commands and setup lines
        block_line = 0
        for command in shell_commands(page):
            if command.block != block_line:
                block, block_line = [], command.block
            parsed = vaswani_arguments(command.words)
            if parsed is None:
                if command.words[0] in SETUP_PROGRAMS and command.source not in block:
                    block.append(command.source)
                continue
            args, environment = parsed
            prelude = tuple(block) if any(isinstance(step, str) for step in block) else ()
            documented = DocumentedCommand(page, command.line, tuple(args), tuple(environment),
                                           piped_text(command.piped_from), errors.get(command.end), prelude)
            found.append(documented)
            block.append(documented)
    return found


COMMANDS = documented_commands()
