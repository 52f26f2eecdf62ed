"""`vaswani classify experiment` on the synthetic task, then `classify summary` over two of its folders: the README
states the folders' own numbers, and words each comparison from them."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from vaswani.classification.results import read_results, results_json
from vaswani.classification.summary import Experiment, findings, load_experiment
from vaswani.cli import main

FAST = ["--preset", "tiny", "--epochs", "3", "--batch-size", "16", "--lr", "2e-3", "--warmup", "10",
        "--patience", "3", "--vocab-size", "300", "--min-frequency", "1", "--no-progress"]


@pytest.fixture(scope="module")
def experiments(synthetic_csv: Path, tmp_path_factory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("experiments")
    folders = root / "results", root / "results" / "cls"
    for folder, extra in zip(folders, ([], ["--pooling", "cls"])):
        code = main(["classify", "experiment", "--csv", str(synthetic_csv), "--text-column", "sentence",
                     "--label-column", "label", "--seeds", "0", "1", "--out", str(folder),
                     "--runs-dir", str(root / "runs" / folder.name), *FAST, *extra])
        assert code == 0
    return folders


def test_summary_states_each_folders_numbers(experiments: tuple[Path, Path]):
    reference, cls = experiments
    assert main(["classify", "summary", str(reference), str(cls)]) == 0
    readme = (reference / "README.md").read_text()
    # The reference is not the defaults (FAST changes them); the other folder is named by what it changes.
    assert "| reference |" in readme and "| `pooling: cls` |" in readme
    assert "[`./`](./table.md)" in readme and "[`cls/`](cls/table.md)" in readme
    for folder in experiments:
        results = json.loads((folder / "results.json").read_text())
        f1 = results["summary"]["transformer"]["macro_f1"]
        assert f"{f1['mean']:.4f} ± {f1['std']:.4f}" in readme
        assert results["command"] in readme  # how to reproduce it
    assert "vaswani classify summary" in readme


def test_results_read_back_as_the_record_they_were_written_from(experiments: tuple[Path, Path]):
    for folder in experiments:
        written = json.loads((folder / "results.json").read_text())
        results = read_results(folder / "results.json")
        assert results_json(results) == written
        assert "seed" not in written["settings"] and [s.seed for s in results.seeds] == [0, 1]
        f1 = written["summary"]["transformer"]["macro_f1"]
        assert results.summary.transformer.macro_f1.mean == f1["mean"]


@pytest.mark.parametrize("name", ["results.json", "bpe/results.json", "keyword/results.json"])
def test_the_published_results_read_back_unchanged(name: str):
    path = Path(__file__).parents[2] / "results" / "classifier" / name
    assert results_json(read_results(path)) == json.loads(path.read_text())


def test_findings_are_worded_from_the_numbers(experiments: tuple[Path, Path]):
    reference, cls = (load_experiment(folder) for folder in experiments)

    def with_f1(experiment: Experiment, mean: float, std: float, baseline: float) -> Experiment:
        changed = copy.deepcopy(experiment)
        summary = changed.results.summary
        summary.transformer.macro_f1.mean, summary.transformer.macro_f1.std = mean, std
        summary.baseline.macro_f1.mean, summary.baseline.macro_f1.std = baseline, 0.0
        return changed

    lines = findings([with_f1(reference, 0.80, 0.01, 0.78), with_f1(cls, 0.75, 0.02, 0.78)])
    assert lines[0].startswith("reference:") and "+2.0 points" in lines[0]
    assert ": ahead by 2.0 seed standard deviations." in lines[0]
    assert lines[1].startswith("`pooling: cls`:") and "-3.0 points" in lines[1]
    assert lines[1].endswith(": behind by 1.5 seed standard deviations.")
    # Against the reference the noise is the larger spread, 2 points: 5 points is 2.5 of them.
    assert "-5.0 points" in lines[2] and "behind by 2.5 seed standard deviations" in lines[2]
    assert "the baseline does not move" in lines[2]
    level = findings([with_f1(reference, 0.80, 0.01, 0.795), with_f1(cls, 0.79, 0.02, 0.795)])
    assert "level" in level[0] and "level" in level[2]


def test_summary_refuses_other_splits_and_foreign_folders(experiments: tuple[Path, Path], tmp_path: Path, capsys):
    reference, cls = experiments
    other = tmp_path / "other"
    other.mkdir()
    results = json.loads((cls / "results.json").read_text())
    results["data"]["split_seed"] = 7
    (other / "results.json").write_text(json.dumps(results))
    assert main(["classify", "summary", str(reference), str(other), "--out", str(tmp_path / "R.md")]) == 2
    error = capsys.readouterr().err.strip()
    assert "data.split_seed" in error and "other/results.json" in error and "\n" not in error
    assert main(["classify", "summary", str(reference), str(tmp_path / "missing")]) == 2
    error = capsys.readouterr().err.strip()
    assert "missing/results.json: not found" in error and "\n" not in error
    (other / "results.json").write_text("{}")
    assert main(["classify", "summary", str(other)]) == 2
    assert 'other/results.json: no field "task"' in capsys.readouterr().err
    results["summary"]["transformer"]["macro_f1"] = {"mean": "0.9", "std": 0.1}  # read as a number by the summary
    (other / "results.json").write_text(json.dumps(results))
    assert main(["classify", "summary", str(other)]) == 2
    assert 'field "summary.transformer.macro_f1.mean" is "0.9", not a number' in capsys.readouterr().err
    assert not (tmp_path / "R.md").exists()


def test_a_second_experiment_keeps_the_first_ones_classifiers_unless_force(experiments, synthetic_csv: Path,
                                                                           capsys) -> None:
    runs = experiments[0].parent / "runs" / experiments[0].name
    before = {p: p.read_bytes() for p in runs.rglob("*") if p.is_file()}
    code = main(["classify", "experiment", "--csv", str(synthetic_csv), "--text-column", "sentence",
                 "--label-column", "label", "--seeds", "1", "--out", str(experiments[0].parent / "again"),
                 "--runs-dir", str(runs), *FAST])
    assert code == 2
    assert f"--runs-dir {runs / 'seed_1'} holds an earlier classifier of `vaswani classify experiment`; pass --force" \
        in capsys.readouterr().err
    assert {p: p.read_bytes() for p in runs.rglob("*") if p.is_file()} == before
