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


# ---- the numbers the pages quote ---------------------------------------------------------------------------------
# README.md, results/README.md and docs/*.md quote figures from the results files they link: in table rows, and in
# paragraphs or list items that link a results file. A figure that is in none of the linked files (a stale number
# after a re-run, a hand-typed one, a difference worked out by hand) is what this catches: quote the file's own
# numbers, at their printed precision or rounded from them.
ROOT = RESULTS.parent
PAGES = [ROOT / "README.md", RESULTS / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
QUOTED_NUMBER = re.compile(r"(?<![\w.`/])[−-]?\d+(?:,\d{3})*(?:\.\d+)?(?:e-?\d+)?")
FILE_NUMBER = re.compile(r"-?\d+(?:,\d{3})*(?:\.\d+)?(?:e[-+]?\d+)?")
LINK = re.compile(r"\]\(([^)#\s]+)\)")


def results_table_rows(page: Path) -> list[tuple[int, str]]:
    """(line number, line) of every table row that links a file."""
    lines = page.read_text(encoding="utf-8").splitlines()
    return [(i, line) for i, line in enumerate(lines, 1) if line.startswith("|") and LINK.search(line)]


def prose_blocks(page: Path, results: Path = RESULTS) -> list[tuple[int, str]]:
    """(first line number, text) of every paragraph or list item outside code blocks and tables that links a
    file under results/."""
    blocks: list[tuple[int, list[str]]] = []
    in_code = False
    for i, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1):
        if line.startswith("```"):
            in_code = not in_code
        if in_code or line.startswith("```") or not line.strip() or line.startswith(("|", "#", "![")):
            blocks.append((i, []))  # ends the block before it
        elif line.lstrip().startswith(("- ", "* ")) or re.match(r"\s*\d+\. ", line) or not blocks or not blocks[-1][1]:
            blocks.append((i, [line]))  # starts a block
        else:
            blocks[-1][1].append(line)
    texts = [(i, " ".join(lines)) for i, lines in blocks if lines]
    return [(i, text) for i, text in texts if any(_in(results, page, link) for link in LINK.findall(text))]


def _in(results: Path, page: Path, link: str) -> bool:
    return not link.startswith("http") and results.resolve() in (page.parent / link).resolve().parents


def numbers_in_files(page: Path, text: str, results: Path = RESULTS) -> list[float]:
    """Every number in the results files ``text`` links to, and in the JSON each linked table was written with."""
    values = []
    for link in LINK.findall(text):
        path = page.parent / link
        assert path.exists(), f"{page.name} links {link}, which does not exist"
        if not _in(results, page, link) or not path.is_file():
            continue
        for source in {path, path.with_suffix(".json"), path.parent / "results.json"}:
            if source.is_file():
                values += [float(n.replace(",", "")) for n in FILE_NUMBER.findall(source.read_text(encoding="utf-8"))]
    return values


def _numbers(text: str) -> list[str]:
    text = re.sub(r"\[[^\]]*\]\([^)]*\)", "", text)
    text = re.sub(r"`[^`]*`", "", text)
    return [m.replace("−", "-").lstrip("-").replace(",", "") for m in QUOTED_NUMBER.findall(text)]


def quoted_numbers(row: str) -> list[str]:
    """Numbers in the row's figure columns: not the first (what was measured) and, in results/README.md, not the
    claim column; links and code spans do not count."""
    cells = row.strip("|").split(" | ")
    first = 2 if len(cells) > 3 else 1
    return _numbers(" | ".join(cells[first:-1]))


def found(quoted: str, values: list[float]) -> bool:
    x = float(quoted)
    if "e" in quoted:  # 9.7e-8: the same to the two digits shown
        return any(abs(abs(v) - x) <= 0.05 * x for v in values)
    decimals = len(quoted.split(".")[1]) if "." in quoted else 0
    return any(abs(abs(v) - x) <= 0.5 * 10**-decimals + 1e-9 for v in values)


def missing_figures(page: Path) -> tuple[int, list[str]]:
    """(how many figures were checked, the ones in no linked file) of one page."""
    checks = [(i, quoted_numbers(row), row) for i, row in results_table_rows(page)]
    checks += [(i, _numbers(text), text) for i, text in prose_blocks(page)]
    missing = [f"{page.relative_to(ROOT)}:{i}: {quoted}" for i, numbers, text in checks for quoted in numbers
               if not found(quoted, numbers_in_files(page, text))]
    return sum(len(numbers) for _, numbers, _ in checks), missing


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_figure_a_page_quotes_is_in_a_file_it_links(page: Path) -> None:
    _, missing = missing_figures(page)
    assert not missing, "numbers in no results file the row or paragraph links to:\n" + "\n".join(missing)


def test_the_pages_quote_figures_where_the_reader_looks_for_them() -> None:
    checked = {page.relative_to(ROOT).as_posix(): missing_figures(page)[0] for page in PAGES}
    assert checked["README.md"] >= 8 and checked["results/README.md"] >= 100, checked
    for page in ("benchmarks", "experiments", "serving"):
        assert checked[f"docs/{page}.md"] >= 5, checked


def test_the_number_check_catches_a_stale_figure(tmp_path: Path) -> None:
    (tmp_path / "table.md").write_text("| x | 40.67 | 1,021 MiB | 9.74e-08 |\n")
    readme = tmp_path / "README.md"
    readme.write_text("| what | number | from |\n|---|---|---|\n"
                      "| a | **40.7** BLEU, 1,021 MiB, 9.7e-8, −40.67 | [`t`](table.md) |\n"
                      "| b | 40.58 BLEU | [`t`](table.md) |\n")
    (first_line, first), (second_line, second) = results_table_rows(readme)
    values = numbers_in_files(readme, first, results=tmp_path)
    assert [found(q, values) for q in quoted_numbers(first)] == [True, True, True, True]
    assert quoted_numbers(second) == ["40.58"] and not found("40.58", values)


def test_a_paragraph_that_links_a_results_file_is_checked_too(tmp_path: Path) -> None:
    (tmp_path / "table.md").write_text("| x | 40.67 | 2 cores |\n")
    page = tmp_path / "page.md"
    page.write_text("# A page\n\nThe run scored 40.67 on 2 cores\n([table](table.md)).\n\n"
                    "- a list item: 40.58 BLEU, [table](table.md)\n\n```bash\nvaswani train  # 99 in code\n```\n\n"
                    "A paragraph with 12 and no link.\n")
    (first_line, first), (second_line, second) = prose_blocks(page, results=tmp_path)
    assert (first_line, second_line) == (3, 6)
    assert [found(q, numbers_in_files(page, first, results=tmp_path)) for q in _numbers(first)] == [True, True]
    assert _numbers(second) == ["40.58"] and not found("40.58", numbers_in_files(page, second, results=tmp_path))


def test_a_tree_copied_without_git_takes_its_commit_from_the_environment(monkeypatch) -> None:
    """A lent GPU machine runs a copy of the working tree, maybe without .git: git fails there."""
    import subprocess

    from vaswani import provenance

    def not_a_repository(command, **kwargs):
        return subprocess.CompletedProcess(command, 128, "", "fatal: not a git repository")

    monkeypatch.setattr(provenance.subprocess, "run", not_a_repository)
    monkeypatch.delenv("VASWANI_GIT_COMMIT", raising=False)
    assert provenance.git_state() == provenance.GitState()
    monkeypatch.setenv("VASWANI_GIT_COMMIT", "a" * 40)
    assert provenance.git_state().to_json() == {"commit": "a" * 40, "dirty": False}


def test_the_commit_in_the_environment_wins_over_an_enclosing_checkout(monkeypatch) -> None:
    """The copy on a lent machine may sit inside another checkout (dirty, at another commit): the results must
    still name the commit the copy was made from."""
    from vaswani import provenance

    monkeypatch.delenv("VASWANI_GIT_COMMIT", raising=False)
    enclosing = provenance.git_state()
    assert re.fullmatch(r"[0-9a-f]{40}", enclosing.commit or ""), enclosing  # this tree is a checkout
    monkeypatch.setenv("VASWANI_GIT_COMMIT", "b" * 40)
    assert provenance.git_state() == provenance.GitState("b" * 40, False)


def test_the_provenance_records_write_the_json_objects_every_results_file_holds(tmp_path: Path) -> None:
    """Keys and their order as results files hold them: a CPU-only machine names no GPU but ``cuda_device``; a
    file read back gives the same record; a run's first training record is read whatever keys it lacks."""
    from vaswani.provenance import GitState, Hardware, Provenance, first_training_start, hardware, provenance

    cpu = ["platform", "processor", "cpu_count", "torch", "torch_threads", "device", "device_name", "cuda_device"]
    details = ["cuda_memory_gib", "cuda_capability", "cuda_version"]
    assert list(hardware("cpu").to_json()) in ([*cpu, "cpu_class"], [*cpu, *details, "cpu_class"])
    assert list(Hardware("Linux", "EPYC", 2, "2.5", 2, "cpu", "EPYC").to_json()) == [*cpu, "cpu_class"]
    gpu = Hardware("Linux", "EPYC", 16, "2.5", 16, "cuda:0", "H200", "H200", 139.8, "9.0", "12.8", "AMX-BF16")
    assert list(gpu.to_json()) == [*cpu, *details, "cpu_class"]
    record = provenance("cpu", command="vaswani x")
    assert list(record.to_json()) == ["command", "git", "hardware", "versions"]
    assert list(record.to_json()["git"]) == ["commit", "dirty"]
    written = json.loads(json.dumps(Provenance("c", GitState(None, None), gpu, {"torch": "2.5"}).to_json()))
    assert Provenance.from_json({**written, "other": 1}) == Provenance("c", GitState(None, None), gpu, {"torch": "2.5"})
    assert first_training_start(tmp_path).record == {}  # no provenance.jsonl
    (tmp_path / "provenance.jsonl").write_text('\n{"command": "vaswani train", "git": null, "precision": "fp32"}\n')
    start = first_training_start(tmp_path)
    assert (start.command, start.git, start.processor, start.precision) == ("vaswani train", GitState(None, None),
                                                                             None, "fp32")
    assert start.cpu_class is None  # a record written before the class was recorded
    (tmp_path / "provenance.jsonl").write_text(json.dumps(record.to_json()) + "\n")
    assert first_training_start(tmp_path).cpu_class == hardware("cpu").cpu_class


@pytest.mark.parametrize(("flags", "expected"), [
    ({"sse2", "avx2", "avx512f", "avx512_bf16", "amx_bf16"}, "AMX-BF16"),
    ({"avx2", "avx512f", "avx512_bf16"}, "AVX512-BF16"),
    ({"avx2", "avx512f"}, "AVX-512 without bf16 units"),
    ({"sse2", "avx2"}, "AVX2 without bf16 units"),
    ({"fp", "asimd"}, None),  # another architecture: no x86 class rather than a wrong one
    (set(), None),
])
def test_the_cpu_class_is_the_most_capable_one_the_flags_show(flags: set[str], expected: str | None) -> None:
    """The class decides a CPU's speed and precision (bf16 units make precision=auto pick bf16), so every results
    file names it: the most capable class whose flag /proc/cpuinfo lists."""
    from vaswani.provenance import cpu_class

    assert cpu_class(flags) == expected
