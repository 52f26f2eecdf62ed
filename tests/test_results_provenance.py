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


# ---- the numbers the READMEs quote ------------------------------------------------------------------------------
# The results tables of README.md and results/README.md quote figures from the files each row links to. A figure
# that is in none of them (a stale number after a re-run, a hand-typed one, a difference worked out by hand) is
# what this catches: quote the file's own numbers, at their printed precision or rounded from them.
QUOTED_NUMBER = re.compile(r"(?<![\w.`/])[−-]?\d+(?:,\d{3})*(?:\.\d+)?(?:e-?\d+)?")
FILE_NUMBER = re.compile(r"-?\d+(?:,\d{3})*(?:\.\d+)?(?:e[-+]?\d+)?")
LINK = re.compile(r"\]\(([^)#\s]+)\)")


def results_table_rows(readme: Path) -> list[tuple[int, str]]:
    """(line number, line) of every table row that links a file."""
    lines = readme.read_text(encoding="utf-8").splitlines()
    return [(i, line) for i, line in enumerate(lines, 1) if line.startswith("|") and LINK.search(line)]


def numbers_in_files(readme: Path, row: str) -> list[float]:
    """Every number in the files the row links to, and in the JSON each linked table was written with."""
    values = []
    for link in LINK.findall(row):
        path = readme.parent / link
        assert path.is_file(), f"{readme.name} links {link}, which is not a file"
        for source in {path, path.with_suffix(".json"), path.parent / "results.json"}:
            if source.is_file():
                values += [float(n.replace(",", "")) for n in FILE_NUMBER.findall(source.read_text(encoding="utf-8"))]
    return values


def quoted_numbers(row: str) -> list[str]:
    """Numbers in the row's figure columns: not the first (what was measured) and, in results/README.md, not the
    claim column; links and code spans do not count."""
    cells = row.strip("|").split(" | ")
    first = 2 if len(cells) > 3 else 1
    text = " | ".join(cells[first:-1])
    text = re.sub(r"\[[^\]]*\]\([^)]*\)", "", text)
    text = re.sub(r"`[^`]*`", "", text)
    return [m.replace("−", "-").lstrip("-").replace(",", "") for m in QUOTED_NUMBER.findall(text)]


def found(quoted: str, values: list[float]) -> bool:
    x = float(quoted)
    if "e" in quoted:  # 9.7e-8: the same to the two digits shown
        return any(abs(abs(v) - x) <= 0.05 * x for v in values)
    decimals = len(quoted.split(".")[1]) if "." in quoted else 0
    return any(abs(abs(v) - x) <= 0.5 * 10**-decimals + 1e-9 for v in values)


@pytest.mark.parametrize("readme", [RESULTS.parent / "README.md", RESULTS / "README.md"],
                         ids=["README.md", "results/README.md"])  # the same wherever the checkout lives
def test_every_number_in_the_results_tables_is_in_a_linked_file(readme: Path) -> None:
    rows = results_table_rows(readme)
    assert len(rows) > 10
    missing = [f"{readme.name}:{i}: {quoted}" for i, row in rows for quoted in quoted_numbers(row)
               if not found(quoted, numbers_in_files(readme, row))]
    assert not missing, "numbers in no file the row links to:\n" + "\n".join(missing)


def test_the_number_check_catches_a_stale_figure(tmp_path: Path) -> None:
    (tmp_path / "table.md").write_text("| x | 40.67 | 1,021 MiB | 9.74e-08 |\n")
    readme = tmp_path / "README.md"
    readme.write_text("| what | number | from |\n|---|---|---|\n"
                      "| a | **40.7** BLEU, 1,021 MiB, 9.7e-8, −40.67 | [`t`](table.md) |\n"
                      "| b | 40.58 BLEU | [`t`](table.md) |\n")
    (first_line, first), (second_line, second) = results_table_rows(readme)
    values = numbers_in_files(readme, first)
    assert [found(q, values) for q in quoted_numbers(first)] == [True, True, True, True]
    assert quoted_numbers(second) == ["40.58"] and not found("40.58", values)


def test_a_tree_copied_without_git_takes_its_commit_from_the_environment(monkeypatch) -> None:
    """A lent GPU machine runs a copy of the working tree, maybe without .git: git fails there."""
    import subprocess

    from vaswani import provenance

    def not_a_repository(command, **kwargs):
        return subprocess.CompletedProcess(command, 128, "", "fatal: not a git repository")

    monkeypatch.setattr(provenance.subprocess, "run", not_a_repository)
    monkeypatch.delenv("VASWANI_GIT_COMMIT", raising=False)
    assert provenance.git_state() == {"commit": None, "dirty": None}
    monkeypatch.setenv("VASWANI_GIT_COMMIT", "a" * 40)
    assert provenance.git_state() == {"commit": "a" * 40, "dirty": False}


def test_the_commit_in_the_environment_wins_over_an_enclosing_checkout(monkeypatch) -> None:
    """The copy on a lent machine may sit inside another checkout (dirty, at another commit): the results must
    still name the commit the copy was made from."""
    from vaswani import provenance

    monkeypatch.delenv("VASWANI_GIT_COMMIT", raising=False)
    enclosing = provenance.git_state()
    assert re.fullmatch(r"[0-9a-f]{40}", enclosing["commit"] or ""), enclosing  # this tree is a checkout
    monkeypatch.setenv("VASWANI_GIT_COMMIT", "b" * 40)
    assert provenance.git_state() == {"commit": "b" * 40, "dirty": False}
