"""`vaswani bench data` on a tiny corpus: the prepare it times as a user runs it, each phase's CPU over wall
seconds (the cores it kept busy) in its results and table, and the progress of the command shown as it
runs; and the whole command as docs/benchmarks.md shows it, whose documented `vaswani prepare --src … --tgt …`
(no --out) must work, with relative --work and --out, each checked by the output rule."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

from vaswani.cli import main
from vaswani.io import write_manifest
from vaswani.tools.data_benchmark import measure_prepare, render_table

PHASES = ["reading", "checking", "tokenizer", "encoding"]


def test_each_phase_of_prepare_reports_its_cpu_over_wall_seconds(tmp_path, capfd, monkeypatch) -> None:
    monkeypatch.setenv("VASWANI_PROGRESS_SECONDS", "1e-9")  # the command's progress: a line per update
    pairs = 3000
    src, tgt = tmp_path / "corpus.de", tmp_path / "corpus.en"
    src.write_text("".join(f"ein Haus {i} und {i % 7} Hunde\n" for i in range(pairs)), encoding="utf-8")
    tgt.write_text("".join(f"a house {i} and {i % 7} dogs\n" for i in range(pairs)), encoding="utf-8")
    prepared = measure_prepare(src, tgt, tmp_path / "size", vocab_size=300, max_len=32)
    assert list(prepared["phases"]) == list(prepared["phase_cpu_seconds"]) == PHASES
    busy = prepared["phase_cpu_over_wall"]
    # a phase long enough to say (≥ 0.1 s) has its ratio: above 0, at most every core (with the clocks' slack)
    assert set(busy) <= set(PHASES)
    assert {phase for phase, seconds in prepared["phases"].items() if seconds >= 0.2} <= set(busy)
    assert all(0 < ratio <= len(os.sched_getaffinity(0)) + 0.5 for ratio in busy.values())
    shown = capfd.readouterr().err
    assert shown.startswith("vaswani prepare --src ") and "\r" not in shown
    assert re.search(r"^  encoding train: 3,000 pairs in \d+:\d\d ", shown, re.M)  # the command's, relayed

    busy = {"tokenizer": 1.0, "encoding": 1.93}
    row = {"pairs": pairs, "prepare": {**prepared, "phase_cpu_over_wall": busy},
           "train": {"first_update_seconds": 4.2, "peak_gb_until_first_update": 0.5, "load_after": []}}
    settings = {"seed": 0, "vocab_size": 300, "max_len": 32}
    table = render_table({"settings": settings, "command": "vaswani bench data", "rows": [row]})
    header, _, line = table.splitlines()[4:7]
    assert "| CPU/wall by phase |" in header and "| tokenizer 1.00, encoding 1.93 |" in line


def test_bench_data_runs_its_documented_commands(tmp_path: Path, data_dir: Path, monkeypatch, capsys) -> None:
    monkeypatch.setenv("VASWANI_DATA", str(data_dir))
    monkeypatch.setenv("VASWANI_CACHE", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)
    code = main(["bench", "data", "--pairs", "200", "--vocab-size", "300", "--max-len", "64",
                 "--work", "work", "--out", "results"])
    assert code == 0, capsys.readouterr().err
    (row,) = json.loads((tmp_path / "results" / "results.json").read_text())["rows"]
    assert row["pairs"] == 200 and row["prepare"]["phases"]["encoding"] >= 0
    assert row["train"]["first_update_seconds"] is not None
    (prepared,) = (tmp_path / "work" / "size-200" / "runs" / "data").iterdir()
    assert (prepared / "tokenizer.json").is_file()


def test_bench_data_work_folder_is_checked(tmp_path: Path, data_dir: Path, capsys) -> None:
    checkpoint = tmp_path / "checkpoint"
    checkpoint.mkdir()
    write_manifest(checkpoint, "checkpoint")
    code = main(["bench", "data", "--pairs", "200", "--work", str(checkpoint / "work"),
                 "--data-dir", str(data_dir)])
    err = capsys.readouterr().err.strip()
    assert code == 2 and "\n" not in err and "--work" in err and "a checkpoint vaswani wrote" in err
    assert sorted(p.name for p in checkpoint.iterdir()) == ["vaswani.json"]


def test_rows_of_another_machine_stay_beside_this_ones_each_naming_its_machine(tmp_path: Path, monkeypatch) -> None:
    import vaswani.tools.data_benchmark as bench

    def row(pairs: int, seconds: float) -> dict:
        return {"pairs": pairs, "prepare": {"seconds": seconds, "peak_gb": 0.7, "load_before": []},
                "train": {"first_update_seconds": 9.0, "peak_gb_until_first_update": 1.0, "load_after": []}}

    settings = {"seed": 0, "vocab_size": 300, "max_len": 32}
    earlier = {"hardware": {"processor": "AMD EPYC", "cpu_count": 2}, "settings": settings,
               "rows": [row(1000, 1.0), row(2000, 2.0)]}  # written before rows named their machine
    (tmp_path / bench.RESULTS).write_text(json.dumps(earlier))
    here = {"command": "vaswani bench data", "git": {"commit": "abc", "dirty": False},
            "hardware": {"processor": "Intel Xeon", "cpu_count": 2}}
    monkeypatch.setattr(bench, "provenance", lambda device: here)
    monkeypatch.setattr(bench, "plot", lambda rows, path: None)
    bench.write_results(tmp_path, [row(2000, 3.0)], None)
    rows = json.loads((tmp_path / bench.RESULTS).read_text())["rows"]
    assert [(r["pairs"], r["machine"], r["prepare"]["seconds"]) for r in rows] == [
        (1000, "AMD EPYC, 2 cores", 1.0), (2000, "AMD EPYC, 2 cores", 2.0), (2000, "Intel Xeon, 2 cores", 3.0)]
    table = (tmp_path / bench.TABLE).read_text()
    assert "| 2,000 | Intel Xeon, 2 cores | 3.0 s |" in table and "| 2,000 | AMD EPYC, 2 cores | 2.0 s |" in table
