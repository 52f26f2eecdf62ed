"""Several training corpora taken at different rates (`data.train_weights`): the sampler's epochs, a run on two
parts of files whose batches hold each part's pairs as often as its weight says and whose corpus.json records
the weights, and the weights that are refused in one line. Tagged parts (`data.train_tags`): the tag is one special
token of the tokenizer, in front of the sources of its part's pairs only, corpus.json records each part with its
weight and tag, and a tag that collides with a special or an ordinary token is refused in one line."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from vaswani.cli import main
from vaswani.data.batching import WeightedSampler


def test_each_epoch_takes_every_pair_as_often_as_its_weight_says():
    lengths = np.full(1000, 5)
    weights = np.r_[np.full(500, 0.5), np.full(500, 3.0)]
    sampler = WeightedSampler(lengths, lengths, weights, max_tokens=60, seed=4)
    epochs = [np.concatenate(sampler.index_arrays(epoch)) for epoch in range(3)]
    for taken in epochs:
        counts = np.bincount(taken, minlength=1000)
        assert (counts[500:] == 3).all()  # whole weights: exactly
        assert set(counts[:500]) <= {0, 1} and 200 < counts[:500].sum() < 300  # halves: about half
    assert not np.array_equal(np.sort(epochs[0]), np.sort(epochs[1]))  # another half each epoch
    again = WeightedSampler(lengths, lengths, weights, max_tokens=60, seed=4)
    assert all(np.array_equal(a, b) for a, b in zip(again.index_arrays(1), sampler.index_arrays(1)))


def write_part(folder: Path, stem: str, count: int, word: str) -> list[str]:
    source, target = folder / f"{stem}.de", folder / f"{stem}.en"
    source.write_text("".join(f"ein {word} nummer {i}\n" for i in range(count)), encoding="utf-8")
    target.write_text("".join(f"a {word} number {i}\n" for i in range(count)), encoding="utf-8")
    return ["--src", str(source), "--tgt", str(target)]


FAST = ["--set", "train.max_steps=2", "--set", "train.eval_every_steps=2", "--set", "train.bleu_subset=0",
        "--set", "train.progress=false", "--set", "data.vocab_size=300", "--set", "train.max_tokens=400",
        "--set", "train.precision=fp32", "--set", "train.device=cpu"]


def test_a_run_on_weighted_parts_takes_each_part_as_often_as_its_weight_and_records_the_weights(
        tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    parts = [*write_part(tmp_path, "big", 400, "hund"), *write_part(tmp_path, "small", 100, "katze")]
    valid = write_part(tmp_path, "dev", 20, "maus")
    valid = ["--valid-src", valid[1], "--valid-tgt", valid[3]]
    argv = ["train", "--preset", "smoke", "--run-dir", str(tmp_path / "run"), *parts, *valid, *FAST,
            "--weight", "1", "--weight", "3"]
    assert main(argv) == 0, capsys.readouterr().err
    corpus = json.loads((tmp_path / "run" / "corpus.json").read_text())
    assert corpus["splits"]["train"]["weights"] == [1.0, 3.0]

    from vaswani.training.presets import load_preset
    from vaswani.training.trainer import Trainer

    trainer = Trainer(load_preset(str(tmp_path / "run" / "config.yaml")), tmp_path / "run", resume=True)
    taken = np.concatenate(trainer.data.epoch_batches(0))
    lines = trainer.data.train.line_index[taken]
    assert (lines < 400).sum() == 400 and (lines >= 400).sum() == 300  # the small part three times


@pytest.mark.parametrize("weights, expected", [
    (["--weight", "1", "--weight", "0"], "--weight: needs a number > 0"),
    (["--weight", "1", "--weight", "nan"], "--weight: needs a number"),
    (["--weight", "2"], "data.train_weights: 1 weight(s) for 2 part(s)"),
    (["--weight", "1", "--weight", "2", "--set", "train.length_buckets=4"], "train.length_buckets"),
    (["--set", "data.train_weights=1,2"], "2 weight(s) for 0 part(s)"),  # before the files replace Multi30k
])
def test_a_weight_that_means_nothing_is_one_line(tmp_path, monkeypatch, capsys, weights, expected):
    monkeypatch.chdir(tmp_path)
    parts = [*write_part(tmp_path, "big", 40, "hund"), *write_part(tmp_path, "small", 10, "katze")]
    try:
        code = main(["train", "--preset", "smoke", "--run-dir", str(tmp_path / "run"), *parts, *weights])
    except SystemExit as stop:  # argparse refuses a flag's value with its usage line, then the error's
        code = stop.code
    err = capsys.readouterr().err
    assert code == 2 and expected in err.strip().splitlines()[-1], err
    assert not (tmp_path / "run").exists()


def test_a_tagged_part_has_its_tag_token_in_front_of_each_source_and_the_other_part_none(
        tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    parts = [*write_part(tmp_path, "real", 200, "hund"), *write_part(tmp_path, "synthetic", 100, "katze")]
    dev = write_part(tmp_path, "dev", 20, "maus")
    argv = ["train", "--preset", "smoke", "--run-dir", str(tmp_path / "run"), *parts, "--valid-src", dev[1],
            "--valid-tgt", dev[3], *FAST, "--weight", "1", "--weight", "2", "--tag", "", "--tag", "<BT>"]
    assert main(argv) == 0, capsys.readouterr().err
    corpus = json.loads((tmp_path / "run" / "corpus.json").read_text())
    assert [(part["weight"], part["tag"]) for part in corpus["splits"]["train"]["parts"]] == [(1.0, ""), (2.0, "<BT>")]

    from vaswani.data.tokenizer import Tokenizer

    tokenizer = Tokenizer.load(tmp_path / "run" / "tokenizer.json")
    tag = tokenizer.tag_id("<BT>")
    assert tag == 4  # the first id after <pad> <s> </s> <unk>
    assert tag not in tokenizer.encode("<BT> ein katze")  # the characters in a text stay ordinary text

    from vaswani.training.presets import load_preset
    from vaswani.training.trainer import Trainer

    data = Trainer(load_preset(str(tmp_path / "run" / "config.yaml")), tmp_path / "run", resume=True).data
    indices = np.concatenate(data.epoch_batches(0)).tolist()
    pairs = data.train_pairs(indices)
    synthetic = data.train.line_index[indices] >= 200
    assert synthetic.sum() == 200  # the weight still applies: the synthetic part twice
    assert all((source[0] == tag) == is_synthetic for (_, source, _), is_synthetic in zip(pairs, synthetic))
    assert all(tag not in source[1:] for _, source, _ in pairs)
    first = pairs[int(np.argmax(synthetic))]
    assert tokenizer.decode(first[1][1:]).startswith("ein katze nummer")  # the tag, then the sentence whole
    batch = data.collate(indices[:8], torch.device("cpu"))
    assert batch.src.shape[0] == 8


@pytest.mark.parametrize("tags, expected", [
    (["--tag", "<s>", "--tag", ""], "'<s>' is one of the tokenizer's own special tokens"),
    (["--tag", "<B T>", "--tag", ""], "'<B T>' is not a tag"),
    (["--tag", "<BT>"], "data.train_tags: 1 tag(s) for 2 part(s)"),
    (["--tag", "ein", "--tag", ""], "tag 'ein' is also an ordinary token of the corpus"),
])
def test_a_tag_that_collides_or_miscounts_is_one_line(tmp_path, monkeypatch, capsys, tags, expected):
    monkeypatch.chdir(tmp_path)
    parts = [*write_part(tmp_path, "big", 60, "hund"), *write_part(tmp_path, "small", 20, "katze")]
    code = main(["train", "--preset", "smoke", "--run-dir", str(tmp_path / "run"), *parts, *FAST, *tags])
    err = capsys.readouterr().err
    assert code == 2 and expected in err.strip().splitlines()[-1], err
    assert not (tmp_path / "run" / "checkpoints").exists()
