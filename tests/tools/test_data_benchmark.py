"""`vaswani bench data` as docs/benchmarks.md shows it, on a corpus small enough for the suite: the documented
`vaswani prepare --src … --tgt …` (no --out) it runs must work, with relative --work and --out."""

from __future__ import annotations

import json
from pathlib import Path

from vaswani.cli import main
from vaswani.io import write_manifest


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
