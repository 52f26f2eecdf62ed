"""Training, saving, predicting and the `vaswani classify` commands, on a synthetic task learned exactly."""

from __future__ import annotations

import csv
import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest
import torch

from vaswani.classification.data import load_dataset
from vaswani.classification.model import TransformerClassifier
from vaswani.classification.predict import Classifier, predict_csv
from vaswani.classification.settings import TrainSettings
from vaswani.classification.train import classifier_step, train_classifier
from vaswani.cli import main
from vaswani.config import ModelConfig

# Small and quick: the keyword task needs few steps once the learning rate is not spent on a long warmup.
FAST = ["--preset", "tiny", "--epochs", "6", "--batch-size", "16", "--lr", "2e-3", "--warmup", "10",
        "--patience", "6", "--vocab-size", "300", "--min-frequency", "1", "--no-progress"]


@pytest.fixture(scope="module")
def trained(synthetic_csv: Path, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("model")
    code = main(["classify", "train", "--csv", str(synthetic_csv), "--text-column", "sentence", "--label-column",
                 "label", "--out", str(out), "--seed", "1", *FAST])
    assert code == 0
    return out


def test_learns_the_synthetic_task_perfectly_and_writes_everything(trained: Path) -> None:
    for name in ("model.safetensors", "classifier.json", "word_tokenizer.json", "report.md", "metrics.json",
                 "confusion.png", "learning_curve.png"):
        assert (trained / name).is_file(), name
    metrics = json.loads((trained / "metrics.json").read_text())
    assert metrics["transformer"]["accuracy"] == 1.0 and metrics["transformer"]["macro_f1"] == 1.0
    assert metrics["labels"] == ["finance", "sports", "weather"]  # string labels, mapped in sorted order
    info = json.loads((trained / "classifier.json").read_text())
    # the default tokenizer
    assert (info["n_classes"], info["tokenizer"], info["pooling"], info["max_len"]) == (3, "word", "mean", 64)
    assert "| `finance` | 12 | 0 | 0 |" in (trained / "report.md").read_text()  # 36 validation rows, 12 a class


def test_csv_predictions_keep_row_order_and_equal_one_by_one(trained: Path, tmp_path: Path, csv_file,
                                                             synthetic) -> None:
    rows = synthetic(30, seed=7)  # texts the model has never seen
    rows.insert(4, ["x", "   ", "finance"])  # an empty text keeps its row, without a prediction
    source = csv_file(tmp_path / "new.csv", ["id", "sentence", "label"], rows)
    classifier = Classifier.load(trained)
    summary = predict_csv(classifier, source, tmp_path / "out.csv")
    assert (summary.rows, summary.empty_text) == (31, 1)

    with open(tmp_path / "out.csv", newline="", encoding="utf-8") as handle:
        out = list(csv.reader(handle))
    assert out[0] == ["id", "sentence", "label", "predicted", "prob_finance", "prob_sports", "prob_weather"]
    assert [r[:3] for r in out[1:]] == rows  # every input column, every row, same order
    assert out[5][3:] == ["", "", "", ""]
    kept = [r for r in out[1:] if r[1].strip()]
    one_by_one = [classifier.predict([r[1]])[0] for r in kept]
    assert [r[3] for r in kept] == one_by_one == [r[2] for r in kept]  # and all correct
    probs = np.array([[float(x) for x in r[4:]] for r in kept])
    np.testing.assert_allclose(probs.sum(axis=1), 1.0, atol=1e-5)
    np.testing.assert_allclose(probs, classifier.predict_proba([r[1] for r in kept]), atol=1e-6)


def test_predict_command_for_one_text_and_for_a_csv(trained: Path, synthetic_csv: Path, synthetic,
                                                    capsys) -> None:
    assert main(["classify", "predict", "--model", str(trained), "--text", "A big storm near the city"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "weather" and lines[1].split()[0] == "weather" and len(lines) == 4

    assert main(["classify", "predict", "--model", str(trained), "--csv", str(synthetic_csv)]) == 0
    out = list(csv.reader(capsys.readouterr().out.splitlines()))
    assert len(out) == 241 and out[1][:3] == synthetic(1, seed=0)[0]


def test_errors_are_one_clear_line(trained: Path, synthetic_csv: Path, tmp_path: Path, capsys) -> None:
    code = main(["classify", "train", "--csv", str(synthetic_csv), "--out", str(tmp_path), *FAST])
    assert code == 2
    err = capsys.readouterr().err
    assert "no column 'text'" in err and "available columns: 'id', 'sentence', 'label'" in err
    assert main(["classify", "predict", "--model", str(tmp_path / "none"), "--text", "x"]) == 2
    assert "not a trained classifier" in capsys.readouterr().err
    assert main(["classify", "predict", "--model", str(trained), "--csv", str(tmp_path / "missing.csv")]) == 2
    assert "missing.csv: file not found" in capsys.readouterr().err
    assert main(["classify", "train", "--csv", str(synthetic_csv), "--set", "dropout=0.2", *FAST]) == 2
    assert "expected section.key=value with section model" in capsys.readouterr().err
    assert main(["classify", "train", "--csv", str(synthetic_csv), *FAST, "--epochs", "0"]) == 2
    assert "--epochs must be >= 1" in capsys.readouterr().err


def test_same_seed_same_model_with_the_word_tokenizer(synthetic_csv: Path, tmp_path: Path) -> None:
    settings = TrainSettings(text_column="sentence", label_column="label", tokenizer="word", min_frequency=1,
                             epochs=2, batch_size=16, lr=2e-3, warmup=10, seed=5)
    data = load_dataset(synthetic_csv, settings)
    first = train_classifier(data, settings, tmp_path / "a", progress=False, log=lambda _: None)
    second = train_classifier(data, settings, tmp_path / "b", progress=False, log=lambda _: None)
    np.testing.assert_array_equal(first.val_probs, second.val_probs)
    assert (tmp_path / "a" / "model.safetensors").read_bytes() == (tmp_path / "b" / "model.safetensors").read_bytes()
    assert (tmp_path / "a" / "word_tokenizer.json").is_file()
    # the saved model reproduces the probabilities training reported
    np.testing.assert_allclose(Classifier.load(tmp_path / "a").predict_proba(data.split("val")[0]), first.val_probs,
                               atol=1e-6)


def test_bf16_autocast_step_runs_and_learns() -> None:
    config = dataclasses.replace(ModelConfig.preset("tiny"), vocab_size=20, max_len=16)
    model = TransformerClassifier(config, 2)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    ids, targets = torch.randint(4, 20, (8, 6)), torch.tensor([0, 1] * 4)
    settings = TrainSettings(precision="bf16")
    losses = [classifier_step(model, optimizer, ids, targets, settings) for _ in range(15)]
    assert losses[-1] < losses[0]


# ---- what a run refuses before it trains, and how it stops ----------------------------------------------------
ONE_EPOCH = [*FAST, "--epochs", "1", "--examples", "0"]


@pytest.fixture
def never_trains(monkeypatch) -> None:
    import vaswani.classification.train as train_module

    monkeypatch.setattr(train_module, "train_classifier", lambda *args, **kwargs: pytest.fail("the model trained"))


def test_texts_without_a_tfidf_word_are_refused_before_training(tmp_path: Path, csv_file, synthetic, never_trains,
                                                                capsys) -> None:
    emoji = csv_file(tmp_path / "emoji.csv", ["text", "target"], [[f"😀 {i % 2}", str(i % 2)] for i in range(200)])
    out = tmp_path / "out"
    assert main(["classify", "train", "--csv", str(emoji), "--out", str(out), *ONE_EPOCH]) == 2
    assert capsys.readouterr().err == (
        f"vaswani classify: error: {emoji}: the texts of column 'text' hold no word of two or more letters or "
        "digits, so the TF-IDF baseline has nothing to count; check that --text-column names the column with the "
        "text\n")
    # the label column given as the text: "finance", "sports"… are words, but one-digit labels are not
    numbered = csv_file(tmp_path / "numbered.csv", ["sentence", "label"],
                        [[row[1], str(i % 3)] for i, row in enumerate(synthetic(90, seed=3))])
    assert main(["classify", "train", "--csv", str(numbered), "--text-column", "label", "--label-column", "label",
                 "--out", str(out), *ONE_EPOCH]) == 2
    assert "the texts of column 'label' hold no word" in capsys.readouterr().err
    assert not out.exists()


@pytest.mark.parametrize("option, value, message", [
    ("--lr", "inf", "--lr must be a number > 0 and <= 1, got inf"),
    ("--lr", "nan", "--lr must be a number > 0 and <= 1, got nan"),
    ("--lr", "5", "--lr must be a number > 0 and <= 1, got 5.0"),
    ("--weight-decay", "inf", "--weight-decay must be a number >= 0 and <= 1, got inf"),
    ("--clip", "nan", "--clip must be a finite number > 0, got nan"),
])
def test_hyperparameters_that_train_to_nan_are_refused(synthetic_csv: Path, tmp_path: Path, never_trains, capsys,
                                                       option: str, value: str, message: str) -> None:
    out = tmp_path / "out"
    code = main(["classify", "train", "--csv", str(synthetic_csv), "--text-column", "sentence", "--label-column",
                 "label", "--out", str(out), *ONE_EPOCH, option, value])
    assert (code, capsys.readouterr().err) == (2, f"vaswani classify: error: {message}\n")
    assert not out.exists()


def test_an_earlier_classifier_is_kept_unless_force(trained: Path, synthetic_csv: Path, tmp_path: Path,
                                                   capsys) -> None:
    import shutil

    out = tmp_path / "earlier"
    shutil.copytree(trained, out)
    before = {path.name: path.read_bytes() for path in out.iterdir()}
    args = ["classify", "train", "--csv", str(synthetic_csv), "--text-column", "sentence", "--label-column", "label",
            "--out", str(out), *ONE_EPOCH]
    assert main(args) == 2
    assert capsys.readouterr().err == (f"vaswani classify: error: --out {out} holds an earlier classifier of "
                                       "`vaswani classify train`; pass --force to replace it\n")
    assert {path.name: path.read_bytes() for path in out.iterdir()} == before  # not one byte changed
    assert main([*args, "--force"]) == 0
    assert (out / "model.safetensors").read_bytes() != before["model.safetensors"]  # --force: the new model


def test_an_out_that_is_a_file_is_refused_before_the_csv_is_read(tmp_path: Path, never_trains, capsys) -> None:
    out = tmp_path / "model"
    out.write_text("keep me")
    code = main(["classify", "train", "--csv", str(tmp_path / "not-read.csv"), "--out", str(out), *ONE_EPOCH])
    assert (code, capsys.readouterr().err) == (2, f"vaswani classify: error: --out {out} is a file, not a directory\n")
    assert out.read_text() == "keep me"


def test_a_diverging_run_stops_in_one_line_and_writes_nothing(synthetic_csv: Path, tmp_path: Path, monkeypatch,
                                                             capsys) -> None:
    import torch.nn.functional as F

    import vaswani.classification.train as training

    out = tmp_path / "out"
    real_loss, real_score = F.cross_entropy, training.score_predictions
    evaluated = []

    def nan_after_an_epoch(logits, targets):  # noqa: ANN001 - F.cross_entropy's; diverges from epoch 2's first batch
        loss = real_loss(logits, targets)
        return loss * float("nan") if evaluated else loss

    def score_predictions(*args):  # noqa: ANN002 - metrics.score_predictions's
        evaluated.append(True)
        return real_score(*args)

    monkeypatch.setattr(F, "cross_entropy", nan_after_an_epoch)
    monkeypatch.setattr(training, "score_predictions", score_predictions)
    code = main(["classify", "train", "--csv", str(synthetic_csv), "--text-column", "sentence", "--label-column",
                 "label", "--out", str(out), *FAST, "--epochs", "3"])
    assert (code, capsys.readouterr().err) == (
        2, "vaswani classify: error: epoch 2, batch 1: the training loss is nan, so training stopped and no model was "
        "written; lower --lr (now 0.002) or --clip (now 1)\n")
    assert not out.exists()  # no nan model, no report: the output is written whole or not at all
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".out.")]  # no half-made classifier either


def test_a_step_with_a_nan_gradient_is_not_taken() -> None:
    from vaswani.classification.train import TrainingDiverged

    config = dataclasses.replace(ModelConfig.preset("tiny"), vocab_size=20, max_len=16)
    model = TransformerClassifier(config, 2)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    ids, targets = torch.randint(4, 20, (8, 6)), torch.tensor([0, 1] * 4)
    weights = {name: p.detach().clone() for name, p in model.named_parameters()}
    first = next(model.parameters())
    first.register_hook(lambda grad: grad * float("inf"))  # one gradient overflows, the loss stays finite
    with pytest.raises(TrainingDiverged, match="the gradient norm is (nan|inf)"):
        classifier_step(model, optimizer, ids, targets, TrainSettings())
    assert all(torch.equal(p, weights[name]) for name, p in model.named_parameters())
