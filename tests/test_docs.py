"""The pages a reader follows work as written: every link leads somewhere, every `vaswani` command in a code block
is one the command line accepts, and the map of the paper names functions that exist."""

from __future__ import annotations

import re
import shlex
import unicodedata
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "src" / "vaswani"
PAGES = [ROOT / "README.md", ROOT / "results" / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"\]\(([^)\s]+)\)")
IDS = lambda page: str(page.relative_to(ROOT))  # noqa: E731


def anchor(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces as hyphens."""
    text = heading.strip().lower()
    text = "".join(c for c in text if c in " -_" or unicodedata.category(c)[0] in "LN")
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    text = re.sub(r"```.*?```", "", page.read_text(encoding="utf-8"), flags=re.S)
    return {anchor(line.lstrip("#")) for line in text.splitlines() if line.startswith("#")}


@pytest.mark.parametrize("page", PAGES, ids=IDS)
def test_every_link_leads_to_a_file_and_heading(page: Path) -> None:
    broken = []
    for link in LINK.findall(page.read_text(encoding="utf-8")):
        if link.startswith(("http://", "https://")):
            continue
        target, _, fragment = link.partition("#")
        path = (page.parent / target) if target else page
        if not path.exists():
            broken.append(f"{link}: no such file")
        elif fragment and fragment not in anchors(path):
            broken.append(f"{link}: no heading #{fragment} in {path.name}")
    assert not broken, f"{page.relative_to(ROOT)}: " + "; ".join(broken)


def shell_commands(page: Path) -> list[tuple[int, list[str]]]:
    """(line, words) of every simple command in the page's ```bash blocks: split at |, &&, ; and &, comments
    gone; a line ending in a backslash goes on in the next one."""
    found, in_bash, pending, start = [], False, "", 0
    for number, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1):
        if line.startswith("```"):
            in_bash = line.strip() == "```bash"
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
        for word in [*lexer, "&&"]:
            if word in ("|", "&&", ";", "||", "&"):
                if words:
                    found.append((start, words))
                words = []
            else:
                words.append(word)
    return found


def vaswani_arguments(words: list[str]) -> list[str] | None:
    """The arguments the ``vaswani`` command line gets from one shell command, or None for another program."""
    while words and re.fullmatch(r"[A-Z_]+=\S*", words[0]):  # VASWANI_DATA=... vaswani ...
        words = words[1:]
    if words[:1] == ["nohup"]:
        words = words[1:]
    if words[:1] == ["vaswani"]:
        return words[1:]
    for entry in ("vaswani", "vaswani.cli"):  # python -m vaswani …, torchrun … -m vaswani.cli …
        for i in range(len(words) - 1):
            if words[i] == "-m" and words[i + 1] == entry and words[0] in ("python", "torchrun"):
                return words[i + 2 :]
    return None


COMMANDS = [(page, line, args) for page in PAGES for line, words in shell_commands(page)
            if (args := vaswani_arguments(words)) is not None]


def test_the_pages_hold_commands_to_check() -> None:
    assert len(COMMANDS) > 25
    assert {page.name for page, _, _ in COMMANDS} >= {"README.md", "training.md", "decoding.md", "benchmarks.md"}


@pytest.mark.parametrize("page,line,args", COMMANDS, ids=[f"{IDS(p)}:{n}" for p, n, _ in COMMANDS])
def test_every_command_in_a_code_block_parses(page: Path, line: int, args: list[str]) -> None:
    from vaswani.cli import build_parser

    try:
        build_parser().parse_args(args)
    except SystemExit:
        pytest.fail(f"{page.relative_to(ROOT)}:{line}: `vaswani {' '.join(args)}` is refused by the command line")


def map_entries(page: Path) -> list[tuple[str, str]]:
    """(file, name) of every name the page's tables place in a source file: `model/attention.py` `KVCache`."""
    entries = []
    for line in page.read_text(encoding="utf-8").splitlines():
        if not line.startswith("|"):
            continue
        current = None
        for token in re.findall(r"`([^`]+)`", line.strip("|").split(" | ")[-1]):
            if token.endswith(".py"):
                current = token
            elif current and re.fullmatch(r"[A-Za-z_]\w*(\.\w+)?", token) and token.split(".")[0] not in (
                    "model", "train", "data", "search"):
                entries.append((current, token))
    return entries


ENTRIES = map_entries(ROOT / "docs" / "architecture.md")


def test_the_map_names_the_code() -> None:
    assert len(ENTRIES) > 40 and ("model/attention.py", "MultiHeadAttention") in ENTRIES


@pytest.mark.parametrize("file,name", ENTRIES, ids=[f"{f}:{n}" for f, n in ENTRIES])
def test_every_name_the_map_gives_is_defined_in_its_file(file: str, name: str) -> None:
    source = (PACKAGE / file).read_text(encoding="utf-8")
    for part in name.split("."):
        defined = rf"(def|class)\s+{part}\b|^{part}\s*[:=]|self\.{part}\s*=|^\s+{part}\s*:"
        assert re.search(defined, source, flags=re.M), f"docs/architecture.md: {name} is not defined in {file}"
