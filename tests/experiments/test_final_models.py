"""`vaswani experiment final-models`: the table is the runs' own numbers, and a run without a final model is refused
with the command that makes one."""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import pytest

from vaswani.cli import main
from vaswani.errors import VaswaniError
from vaswani.experiments.final_models import PROBES, final_model_row, findings


def test_the_table_holds_the_runs_own_numbers_and_files(finished_run, tmp_path) -> None:
    run_dir, summary = finished_run
    out = tmp_path / "final-models"
    assert main(["experiment", "final-models", "--runs", str(run_dir), "--out", str(out)]) == 0
    row = json.loads((out / "results.json").read_text())["results"]["rows"][0]
    selection = json.loads((run_dir / "checkpoints" / "final" / "selection.json").read_text())
    assert row["final_weights"] == selection["weights"] == summary.final.weights
    assert row["val_bleu_final"] == selection["valid"]["bleu"]
    assert row["test"]["multi30k-test2016"]["bleu"] == selection["test"]["multi30k-test2016"]["bleu"]
    assert row["updates"] == summary.step == 12 and row["wall_minutes"] == summary.wall_minutes
    table = (out / "table.md").read_text()
    assert f"| {selection['test']['multi30k-test2016']['bleu']:.2f} |" in table
    copied = out / run_dir.name
    assert (copied / "checkpoints" / "final" / "search.json").read_text() == \
        (run_dir / "checkpoints" / "final" / "search.json").read_text()
    assert (copied / "checkpoints" / "final" / "eval" / "multi30k-test2016" / "hypotheses.txt").is_file()
    assert not list(copied.rglob("*.safetensors"))  # weights stay in the run
    assert (out / "final_models.png").stat().st_size > 0
    assert [p["source"] for p in row["probes"]] == [source for _, source in PROBES]
    readme = (out / "README.md").read_text()
    assert "Multi30k holds image captions only" in readme and row["probes"][1]["translation"] in readme


def test_the_findings_follow_the_numbers(finished_run) -> None:
    row = final_model_row(finished_run[0])
    averaged = dataclasses.replace(row, final_weights="average of last 3", val_bleu_best_checkpoint_greedy=30.0,
                                   val_bleu_final_weights_greedy=31.25, final_search="beam 5, alpha 1",
                                   val_bleu_final=33.0, wall_minutes=57.0)
    text = findings([averaged])
    assert "the average of the last 3 checkpoints, translate validation +1.25 BLEU better" in text
    assert "Beam 5, alpha 1 adds +1.75 BLEU over greedy" in text and "inside the hour" in text
    text = findings([dataclasses.replace(averaged, final_weights="best", final_search="greedy", wall_minutes=61.0)])
    assert "also the best translator" in text and "Greedy search beat every beam" in text and "over the hour" in text


def test_a_run_without_a_final_model_is_refused_with_the_command_that_makes_one(finished_run, tmp_path) -> None:
    run_dir = tmp_path / "unfinalized"
    shutil.copytree(finished_run[0], run_dir, symlinks=True)
    shutil.rmtree(run_dir / "checkpoints" / "final")
    with pytest.raises(VaswaniError, match=f"vaswani finalize --run-dir {run_dir}"):
        final_model_row(run_dir)
    (run_dir / "summary.json").unlink()
    with pytest.raises(VaswaniError, match="has not finished"):
        final_model_row(Path(run_dir))
    with pytest.raises(VaswaniError, match="no such run directory"):  # not "has not finished": it never started
        final_model_row(tmp_path / "typo")
