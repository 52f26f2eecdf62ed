"""Every published figure names the command that made it and a commit anyone can check out: a results file from a
tree with uncommitted changes, or with no command at all, is not a result (README: "A figure without its command
is not a result"). Run directories published whole carry theirs in provenance.jsonl."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

RESULTS = Path(__file__).resolve().parents[1] / "results"


def provenance_records(path: Path) -> list[dict]:
    """The provenance a results file carries: at its top level, under "provenance", or one per line of a
    provenance.jsonl."""
    if path.name == "provenance.jsonl":
        return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    data = json.loads(path.read_text(encoding="utf-8"))
    if not isinstance(data, dict):
        return []
    if "git" in data:
        return [data]
    if isinstance(data.get("provenance"), dict) and "git" in data["provenance"]:
        return [data["provenance"]]
    return []


def run_directory(path: Path) -> Path | None:
    """The published run directory (one with a provenance.jsonl) that holds ``path``, if any."""
    for parent in path.parents:
        if (parent / "provenance.jsonl").is_file():
            return parent
        if parent == RESULTS:
            return None
    return None


FILES = sorted([*RESULTS.rglob("*.json"), *RESULTS.rglob("provenance.jsonl")])


def test_the_results_folder_was_found() -> None:
    assert len(FILES) > 20


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(RESULTS)))
def test_each_result_names_its_command_and_a_clean_commit(path: Path) -> None:
    records = provenance_records(path)
    if not records:  # e.g. a checkpoint's model.json inside a published run: the run's provenance covers it
        assert run_directory(path) is not None, f"{path} carries no command, commit or hardware"
        return
    for record in records:
        assert re.match(r"(vaswani|python -m vaswani)\b", record.get("command") or ""), record.get("command")
        git = record["git"]
        assert re.fullmatch(r"[0-9a-f]{40}", git.get("commit") or ""), git
        assert git.get("dirty") is False, f"{path} came from a tree with uncommitted changes: measure it again"
