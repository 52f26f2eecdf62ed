"""Fine-tuning (`vaswani train --init-from`), end to end as a user types it: the tiny Multi30k run of the
session (its final model) fine-tuned on a few hundred pairs of other files. The parent is only read; the
child starts from its weights with its model and tokenizer; frozen parts stay bit for bit as the parent left
them (CPU, fp32); a parent that is missing, damaged or of another kind, and a model setting the weights depend
on, are refused in one line with nothing written; a fine-tuned run resumes from its own checkpoints without
its parent."""

from __future__ import annotations

import gzip
import hashlib
import json
import shutil
from pathlib import Path

import pytest
from safetensors.torch import load_file

from vaswani.cli import main
from vaswani.io import write_manifest

FAST = ["--set", "train.max_steps=4", "--set", "train.eval_every_steps=2", "--set", "train.bleu_subset=0",
        "--set", "train.progress=false", "--set", "train.precision=fp32", "--set", "train.device=cpu",
        "--set", "train.max_tokens=600"]


def tree_digest(folder: Path) -> dict[str, str]:
    return {str(path.relative_to(folder)): hashlib.sha256(path.read_bytes()).hexdigest()
            for path in sorted(folder.rglob("*")) if path.is_file() and not path.is_symlink()}


@pytest.fixture
def news(tmp_path: Path, data_dir: Path) -> dict[str, Path]:
    """A small corpus of other files: 200 test2016 pairs to train on, 40 test2017 pairs to validate on."""
    files = {}
    for name, source, lines in (("train", "test_2016_flickr", 200), ("dev", "test_2017_flickr", 40)):
        for lang in ("de", "en"):
            text = gzip.open(data_dir / "multi30k" / f"{source}.{lang}.gz", "rt", encoding="utf-8").read()
            files[f"{name}.{lang}"] = tmp_path / f"{name}.{lang}"
            files[f"{name}.{lang}"].write_text("\n".join(text.splitlines()[:lines]) + "\n", encoding="utf-8")
    return files


def fine_tune(capsys, run_dir: Path, parent: Path, news: dict[str, Path], *extra: str) -> tuple[int, str]:
    code = main(["train", "--preset", "smoke", "--run-dir", str(run_dir), "--init-from", str(parent),
                 "--src", str(news["train.de"]), "--tgt", str(news["train.en"]),
                 "--valid-src", str(news["dev.de"]), "--valid-tgt", str(news["dev.en"]), *FAST, *extra])
    return code, capsys.readouterr().err


def test_a_fine_tuned_run_starts_from_its_parent_keeps_frozen_embeddings_and_leaves_the_parent_alone(
        capsys, tmp_path, monkeypatch, finished_run, news):
    parent, _ = finished_run
    monkeypatch.chdir(tmp_path)  # the prepared data goes to ./runs/data
    before = tree_digest(parent)
    final = parent / "checkpoints" / "final"
    code, err = fine_tune(capsys, tmp_path / "child", parent, news, "--set", "train.freeze=embeddings")
    assert code == 0, err
    assert tree_digest(parent) == before  # byte for byte, every file

    child = tmp_path / "child"
    # the parent's tokenizer prepared the new corpus, and its model is the child's
    assert (child / "tokenizer.json").read_bytes() == (final / "tokenizer.json").read_bytes()
    assert json.loads((child / "checkpoints" / "last" / "model.json").read_text()) == \
        json.loads((final / "model.json").read_text())
    start = json.loads((child / "provenance.jsonl").read_text().splitlines()[0])
    assert start["init_from"] == {
        "checkpoint": str(final.resolve()),
        "weights_sha256": hashlib.sha256((final / "model.safetensors").read_bytes()).hexdigest(),
        "manifest_sha256": hashlib.sha256((final / "vaswani.json").read_bytes()).hexdigest()}

    was = load_file(final / "model.safetensors")
    now = load_file(child / "checkpoints" / "last" / "model.safetensors")
    embeddings = [name for name in now if "embed" in name]
    assert embeddings
    for name in embeddings:  # frozen: exactly the parent's, which also shows the weights were the parent's
        assert now[name].equal(was[name]), name
    trained = [name for name in now if name not in embeddings]
    assert all(not now[name].equal(was[name]) for name in trained if name.endswith("ffn.up.weight"))
    assert any(not now[name].equal(was[name]) for name in trained)


def test_freezing_the_encoder_keeps_its_layers_and_trains_the_decoder(capsys, tmp_path, monkeypatch,
                                                                       finished_run, news):
    parent, _ = finished_run
    monkeypatch.chdir(tmp_path)
    code, err = fine_tune(capsys, tmp_path / "child", parent / "checkpoints" / "final", news,
                          "--set", "train.freeze=encoder")
    assert code == 0, err
    was = load_file(parent / "checkpoints" / "final" / "model.safetensors")
    now = load_file(tmp_path / "child" / "checkpoints" / "last" / "model.safetensors")
    encoder = [name for name in now if name.startswith("encoder.layers.")]
    decoder = [name for name in now if name.startswith("decoder.layers.")]
    assert encoder and decoder
    assert all(now[name].equal(was[name]) for name in encoder)
    assert any(not now[name].equal(was[name]) for name in decoder)


def _classifier_like(folder: Path) -> Path:
    folder.mkdir()
    (folder / "weights.bin").write_bytes(b"\0" * 16)
    write_manifest(folder, "classifier")
    return folder


def _damaged(folder: Path, parent: Path) -> Path:
    shutil.copytree(parent / "checkpoints" / "final", folder)
    weights = folder / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-64])  # cut short
    return folder


@pytest.mark.parametrize("case, expected", [
    ("missing", "no such run directory or checkpoint"),
    ("classifier", "is a classifier"),
    ("damaged", "model.safetensors"),
    ("other shape", "model.d_model=96: a run initialised from"),
    ("with resume", "--init-from starts a new run"),
    ("a tag its tokenizer lacks", "tag '<BT>' is not a special token of this tokenizer"),
])
def test_a_parent_that_cannot_be_fine_tuned_is_one_line_and_nothing_is_written(
        capsys, tmp_path, monkeypatch, finished_run, news, case, expected):
    parent, _ = finished_run
    monkeypatch.chdir(tmp_path)
    extra: list[str] = []
    if case == "missing":
        parent = tmp_path / "no-such-run"
    elif case == "classifier":
        parent = _classifier_like(tmp_path / "classifier")
    elif case == "damaged":
        parent = _damaged(tmp_path / "damaged", parent)
    elif case == "other shape":
        extra = ["--set", "model.d_model=96"]
    elif case == "a tag its tokenizer lacks":  # the run is prepared with the parent's tokenizer, which has no tags
        extra = ["--tag", "<BT>"]
    else:
        extra = ["--resume"]
    code, err = fine_tune(capsys, tmp_path / "child", parent, news, *extra)
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and expected in lines[0], err
    assert not (tmp_path / "child").exists() and not (tmp_path / "runs").exists()


def test_a_fine_tuned_run_resumes_from_its_own_checkpoints_without_its_parent(capsys, tmp_path, monkeypatch,
                                                                              finished_run, news):
    source, _ = finished_run
    parent = Path(shutil.copytree(source / "checkpoints" / "final", tmp_path / "parent"))
    monkeypatch.chdir(tmp_path)
    code, err = fine_tune(capsys, tmp_path / "child", parent, news, "--set", "train.max_steps=2")
    assert code == 0, err
    shutil.rmtree(parent)  # a resume reads nothing of it
    code = main(["train", "--run-dir", str(tmp_path / "child"), "--resume", "--set", "train.max_steps=4"])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert json.loads(out.strip().splitlines()[-1])["step"] == 4
    assert "resumed from" in err and "step 2" in err
    starts = [json.loads(line) for line in (tmp_path / "child" / "provenance.jsonl").read_text().splitlines()]
    assert [start["resumed"] for start in starts] == [False, True] and "init_from" not in starts[1]


FINAL = ["--set", "train.final_model=true", "--set", "train.final_valid_sentences=16", "--set",
         "train.final_beam=2", "--set", "train.final_alphas=[1.0]", "--set", "train.average_last=0"]


def test_the_final_model_of_a_fine_tuned_run_is_scored_beside_its_parent_on_the_parents_validation_split(
        capsys, tmp_path, monkeypatch, finished_run, data_dir, news):
    source, _ = finished_run
    parent = Path(shutil.copytree(source, tmp_path / "parent", symlinks=True))
    monkeypatch.chdir(tmp_path)
    code, err = fine_tune(capsys, tmp_path / "child", parent, news, "--data-dir", str(data_dir), *FINAL)
    assert code == 0, err
    selection = json.loads((tmp_path / "child" / "checkpoints" / "final" / "selection.json").read_text())
    scored = selection["parent_validation"]
    assert scored["checkpoint"] == str((parent / "checkpoints" / "final").resolve())
    assert scored["split"] == "val" and scored["sentences"] == 16
    assert {"bleu", "chrf", "length_ratio"} <= set(scored["parent"]) & set(scored["fine_tuned"])
    assert "parent validation (val, 16 sentences): BLEU" in err
    assert selection["valid_split"] == "valid"  # the run's own validation still chooses the final model

    (parent / "config.yaml").unlink()  # the parent's run is gone: finalize says so and scores the rest
    code = main(["finalize", "--run-dir", str(tmp_path / "child"), "--data-dir", str(data_dir)])
    err = capsys.readouterr().err
    assert code == 0, err
    assert "parent validation: left out" in err
    selection = json.loads((tmp_path / "child" / "checkpoints" / "final" / "selection.json").read_text())
    assert selection["parent_validation"] is None
