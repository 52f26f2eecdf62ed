"""`vaswani bench runs`: the speed of real runs is read from their own logs, with the commit that trained them."""

from __future__ import annotations

import json
from pathlib import Path

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
