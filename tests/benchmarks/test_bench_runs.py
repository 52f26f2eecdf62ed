"""`vaswani bench runs`: the speed of real runs is read from their own logs, with the commit that trained them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from vaswani.cli import main


def _fake_run(directory: Path, tokens_per_s: list[float], commit: str) -> Path:
    directory.mkdir()
    records = [{"kind": "train", "step": 10 * (i + 1), "elapsed_s": 5.0 * (i + 1), "tokens_per_s": rate}
               for i, rate in enumerate(tokens_per_s)]
    records.insert(2, {"kind": "valid", "step": 20, "loss": 3.0})  # the window after an evaluation is left out
    (directory / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    (directory / "provenance.jsonl").write_text(json.dumps({"git": {"commit": commit, "dirty": False},
                                                            "command": "vaswani train", "torch_threads": 2}) + "\n")
    return directory


def test_bench_runs_reports_median_speed_and_the_ratio(tmp_path: Path, capsys) -> None:
    before = _fake_run(tmp_path / "before", [100.0, 110.0, 90.0], "a" * 40)
    after = _fake_run(tmp_path / "after", [150.0, 165.0, 135.0], "b" * 40)
    out = tmp_path / "out"
    assert main(["bench", "runs", str(before), str(after), "--labels", "before", "after", "--out", str(out)]) == 0
    rows = json.loads((out / "results.json").read_text())["runs"]
    assert [r["tokens_per_s"] for r in rows] == [100.0, 150.0] and rows[1]["commit"] == "b" * 40
    assert "1.50×" in (out / "table.md").read_text() and "1.50×" in capsys.readouterr().out
    assert main(["bench", "runs", str(tmp_path / "missing")]) == 2


DAMAGED = [
    # (line appended to a good log, what the error says of it)
    ("[1, 2]", "an array, not a JSON object"),
    ('{"kind": "train", "step": "x", "tokens_per_s": "fast"}', '"step" is "x", not a whole number >= 0'),
    ('{"kind": "train", "step": 40, "tokens_per_s": "fast"}', '"tokens_per_s" is "fast", not a number'),
    ('{"kind": "valid", "step": 40, "loss": true}', '"loss" is true, not a number'),
    ('{"step": 40}', 'no "kind"'),
    ('"a string"', "a string, not a JSON object"),
    ("17", "a number, not a JSON object"),
]


@pytest.mark.parametrize("line, problem", DAMAGED, ids=[problem for _, problem in DAMAGED])
def test_a_record_unlike_the_trainers_is_named_by_its_line(tmp_path: Path, capsys, line: str, problem: str) -> None:
    run = _fake_run(tmp_path / "r", [100.0, 110.0, 90.0], "a" * 40)
    with (run / "metrics.jsonl").open("a") as handle:
        handle.write("\n" + line + "\n")  # a blank line first: the number is the file's line, as an editor shows
    out = tmp_path / "out"
    assert main(["bench", "runs", str(run), "--out", str(out)]) == 2
    assert capsys.readouterr().err == (f"vaswani bench: error: {run}/metrics.jsonl:6: not a metrics record "
                                       f"({problem}); the metrics log is damaged\n")
    assert not out.exists()


def test_an_empty_metrics_log_is_not_called_missing(tmp_path: Path, capsys) -> None:
    run = _fake_run(tmp_path / "r", [100.0], "a" * 40)
    (run / "metrics.jsonl").write_text("\n  \n")
    assert main(["bench", "runs", str(run)]) == 2
    assert capsys.readouterr().err == (f"vaswani bench: error: {run}/metrics.jsonl is empty: the run logged no step; "
                                       "train it longer or give another run\n")
    (run / "metrics.jsonl").unlink()
    assert main(["bench", "runs", str(run)]) == 2
    assert capsys.readouterr().err == (f"vaswani bench: error: {run}: no metrics.jsonl; was it trained by "
                                       "`vaswani train`?\n")


def test_a_damaged_provenance_log_is_named_by_its_line(tmp_path: Path, capsys) -> None:
    run = _fake_run(tmp_path / "r", [100.0, 110.0, 90.0], "a" * 40)
    (run / "provenance.jsonl").write_text("\n[1, 2]\n")
    assert main(["bench", "runs", str(run)]) == 2
    assert capsys.readouterr().err == (f"vaswani bench: error: {run}/provenance.jsonl:2: not a provenance record "
                                       "(a JSON object); the file is damaged\n")
