"""`vaswani bench data` on a tiny corpus: the prepare it times as a user runs it, each phase's CPU over wall
seconds (the cores it kept busy) in its results and table, and the progress of the command shown as it
runs; and the whole command as docs/benchmarks.md shows it, whose documented `vaswani prepare --src … --tgt …`
(no --out) must work, with relative --work and --out, each checked by the output rule."""

from __future__ import annotations

import dataclasses
import json
import os
import re
from pathlib import Path

import pytest

from vaswani.cli import main
from vaswani.errors import VaswaniError
from vaswani.io import write_manifest
from vaswani.provenance import GitState, Hardware, Provenance
from vaswani.records import to_json
from vaswani.tools.data_benchmark import measure_prepare
from vaswani.tools.data_benchmark_report import (
    BenchSettings,
    DataScaleResults,
    Measurement,
    Prepared,
    Row,
    Trained,
    render_table,
)

PHASES = ["reading", "checking", "tokenizer", "encoding"]
SETTINGS = BenchSettings(seed=0, vocab_size=300, max_len=32)
TRAINED = Trained(first_update_seconds=9.0, peak_gb_until_first_update=1.0, seconds=12.0, peak_gb=1.0,
                  load_before=[], load_after=[])


def _row(pairs: int, prepare: Prepared) -> Row:
    return Row(pairs=pairs, prepare=prepare, train=TRAINED, command="vaswani bench data", commit=None, dirty=None,
               measured="2026-01-01 00:00")


def test_each_phase_of_prepare_reports_its_cpu_over_wall_seconds(tmp_path, capfd, monkeypatch) -> None:
    monkeypatch.setenv("VASWANI_PROGRESS_SECONDS", "1e-9")  # the command's progress: a line per update
    pairs = 3000
    src, tgt = tmp_path / "corpus.de", tmp_path / "corpus.en"
    src.write_text("".join(f"ein Haus {i} und {i % 7} Hunde\n" for i in range(pairs)), encoding="utf-8")
    tgt.write_text("".join(f"a house {i} and {i % 7} dogs\n" for i in range(pairs)), encoding="utf-8")
    prepared = measure_prepare(src, tgt, tmp_path / "size", vocab_size=300, max_len=32)
    assert list(prepared.phases) == list(prepared.phase_cpu_seconds) == PHASES
    busy = prepared.phase_cpu_over_wall
    # a phase long enough to say (≥ 0.1 s) has its ratio: above 0, at most every core (with the clocks' slack)
    assert set(busy) <= set(PHASES)
    assert {phase for phase, seconds in prepared.phases.items() if seconds >= 0.2} <= set(busy)
    assert all(0 < ratio <= len(os.sched_getaffinity(0)) + 0.5 for ratio in busy.values())
    shown = capfd.readouterr().err
    assert shown.startswith("vaswani prepare --src ") and "\r" not in shown
    assert re.search(r"^  encoding train: 3,000 pairs in \d+:\d\d ", shown, re.M)  # the command's, relayed

    row = _row(pairs, dataclasses.replace(prepared, phase_cpu_over_wall={"tokenizer": 1.0, "encoding": 1.93}))
    table = render_table(DataScaleResults(command="vaswani bench data", git={}, hardware={}, versions={},
                                          settings=SETTINGS, rows=[row]))
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

    def prepared(seconds: float) -> Prepared:  # without CPU seconds: a figure a row may lack
        return Prepared(seconds=seconds, peak_gb=0.7, phases={}, load_before=[], load_after=[])

    earlier = to_json(DataScaleResults(command="vaswani bench data", git={}, hardware={"processor": "AMD EPYC",
                                       "cpu_count": 2}, versions={}, settings=SETTINGS,
                                       rows=[_row(1000, prepared(1.0)), _row(2000, prepared(2.0))]))
    for row in earlier["rows"]:  # written before rows named their machine
        del row["machine"], row["prepare"]["cpu_seconds"]
    (tmp_path / bench.RESULTS).write_text(json.dumps(earlier))
    here = Provenance("vaswani bench data", GitState("abc", False),
                      Hardware("Linux", "Intel Xeon", 2, "2.5", 2, "cpu", "Intel Xeon"))
    monkeypatch.setattr(bench, "provenance", lambda device: here)
    monkeypatch.setattr(bench, "plot", lambda rows, path: None)
    bench.write_results(tmp_path, [Measurement(2000, prepared(3.0), TRAINED)], None)
    rows = json.loads((tmp_path / bench.RESULTS).read_text())["rows"]
    assert [(r["pairs"], r["machine"], r["prepare"]["seconds"]) for r in rows] == [
        (1000, "AMD EPYC, 2 cores", 1.0), (2000, "AMD EPYC, 2 cores", 2.0), (2000, "Intel Xeon, 2 cores", 3.0)]
    assert all("cpu_seconds" not in r["prepare"] for r in rows)  # a figure a row lacks stays out, not null
    table = (tmp_path / bench.TABLE).read_text()
    assert "| 2,000 | Intel Xeon, 2 cores | 3.0 s |" in table and "| 2,000 | AMD EPYC, 2 cores | 2.0 s |" in table

    rows[0]["train"]["peak_gb"] = "1 GB"  # a damaged row: one error naming the file and the field
    (tmp_path / bench.RESULTS).write_text(json.dumps({**earlier, "rows": rows}))
    with pytest.raises(VaswaniError, match=r'results.json: field "rows\[0\].train.peak_gb" is "1 GB", not a number'):
        bench.write_results(tmp_path, [], None)
