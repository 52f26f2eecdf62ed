"""`vaswani experiment ensemble`: single models against ensembles of their runs, grouped in order; BLEU per size
with its range, speed from interleaved repeats; seeds trained into --runs-dir and reused, or runs given."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from vaswani.cli import main
from vaswani.decoding import SearchConfig
from vaswani.experiments.ensemble import EnsembleSettings, System, groups, summarize, table


def test_runs_are_grouped_in_order_and_a_remainder_is_left_out() -> None:
    assert groups(range(4), 1) == [[0], [1], [2], [3]]
    assert groups(range(5), 2) == [[0, 1], [2, 3]]
    assert groups(range(4), 4) == [[0, 1, 2, 3]] and groups(range(3), 4) == []


def test_a_row_is_the_mean_and_range_of_its_systems_and_the_median_speed() -> None:
    systems = [System(1, ["a"], {"val": 30.0, "test2016": 31.0}), System(1, ["b"], {"val": 32.0, "test2016": 33.0}),
               System(2, ["a", "b"], {"val": 34.0, "test2016": 35.5})]
    rows = summarize(systems, {1: [2.0, 1.0, 4.0], 2: [4.0, 5.0, 3.0]}, sentences=100)
    assert [(row.size, row.systems) for row in rows] == [(1, 2), (2, 1)]
    assert rows[0].bleu == {"val": 31.0, "test2016": 32.0} and rows[0].bleu_min["val"] == 30.0
    assert rows[0].bleu_max["test2016"] == 33.0
    assert rows[0].sentences_per_second == 50.0 and rows[1].sentences_per_second == 25.0  # medians 2 s and 4 s
    assert rows[1].speed_vs_single == 0.5
    settings = EnsembleSettings(["runs/a", "runs/b"], ["runs/a/checkpoints/best", "runs/b/checkpoints/best"], None,
                                [1, 2], 5, SearchConfig(beam_size=5), "torch", "fp32", ["val", "test2016"],
                                {"val": 10, "test2016": 10}, 3, "test2016", [1.0, 2.0])
    text = table(rows, settings, "Measured on X.")
    assert "| 2 | 1 | 34.00 (34.00-34.00) | 35.50 (35.50-35.50) | 25.0 | 0.50 |" in text
    assert "2 given runs (runs/a, runs/b)" in text and "median of 3" in text


def test_a_smoke_study_trains_seeds_then_reuses_them_and_scores_given_runs(tmp_path: Path, data_dir: Path,
                                                                           prepared_multi30k, monkeypatch,
                                                                           experiment, capsys) -> None:
    monkeypatch.setenv("VASWANI_CACHE", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)
    prepared_multi30k(tmp_path)  # the tiny runs' BPE (data.vocab_size=400), prepared once per session
    runs = tmp_path / "runs"
    common = ["--smoke", "--sizes", "1", "2", "--repeats", "2", "--data-dir", str(data_dir), "--set",
              "data.vocab_size=400"]
    payload = experiment("ensemble", tmp_path / "out", *common, "--seeds", "0", "1", "--runs-dir", str(runs))
    results, settings = payload["results"], payload["settings"]
    assert [(s["size"], s["members"]) for s in results["systems"]] == [(1, ["seed0"]), (1, ["seed1"]),
                                                                      (2, ["seed0", "seed1"])]
    assert [(r["size"], r["systems"], len(r["repeat_seconds"])) for r in results["rows"]] == [(1, 2, 2), (2, 1, 2)]
    assert results["rows"][0]["speed_vs_single"] == 1.0 and results["rows"][1]["sentences_per_second"] > 0
    assert settings["sentences"] == {"val": 8, "test2016": 8} and settings["trained"]["seeds"] == [0, 1]
    assert yaml.safe_load((runs / "seed1" / "config.yaml").read_text())["train"]["seed"] == 1
    assert "| 2 | 1 |" in (tmp_path / "out" / "table.md").read_text()
    capsys.readouterr()

    experiment("ensemble", tmp_path / "again", *common, "--seeds", "0", "1", "--runs-dir", str(runs))
    assert "[seed1] reusing the finished run" in capsys.readouterr().err  # nothing trained again
    given = experiment("ensemble", tmp_path / "given", *common, "--runs", str(runs / "seed1"), str(runs / "seed0"))
    assert given["settings"]["trained"] is None
    assert given["results"]["systems"][2]["members"] == ["seed1", "seed0"]
    assert given["results"]["systems"][0]["bleu"] == results["systems"][1]["bleu"]  # the same model, same BLEU


@pytest.mark.parametrize("options, message", [
    (["--runs", "a", "b", "--seeds", "0"], "--runs and --seeds"),
    (["--runs", "a", "--sizes", "1", "2"], "--sizes 2: an ensemble of 2 needs as many runs, and there are 1"),
])
def test_what_the_study_cannot_score_is_refused_in_one_line(tmp_path: Path, options: list[str], message: str,
                                                            capsys) -> None:
    assert main(["experiment", "ensemble", "--out", str(tmp_path / "out"), "--device", "cpu", *options]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1
