"""The pages a reader follows work as written: every link leads somewhere, every `vaswani` command in a code block
is one the command line accepts, and the map of the paper names functions that exist."""

from __future__ import annotations

import re
import unicodedata
from pathlib import Path

import pytest
from documented_commands import COMMANDS, PAGES, ROOT, DocumentedCommand

PACKAGE = ROOT / "src" / "vaswani"
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


def test_the_pages_hold_commands_to_check() -> None:
    assert len(COMMANDS) > 25
    assert {c.page.name for c in COMMANDS} >= {"README.md", "training.md", "decoding.md", "benchmarks.md"}


@pytest.mark.parametrize("command", COMMANDS, ids=[c.where for c in COMMANDS])
def test_every_command_in_a_code_block_parses(command: DocumentedCommand) -> None:
    from vaswani.cli import build_parser

    try:
        build_parser().parse_args(list(command.args))
    except SystemExit:
        pytest.fail(f"{command.where}: `{command.text}` is refused by the command line")


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
