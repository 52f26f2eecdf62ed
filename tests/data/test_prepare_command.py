"""`vaswani prepare` end to end on Multi30k, and the Python entry point training calls."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np

from vaswani.cli import main
from vaswani.data.pipeline import prepare_dataset
from vaswani.io import write_manifest


def test_prepare_multi30k_end_to_end_then_cache(data_dir, tmp_path, capsys):
    out = tmp_path / "m30k"
    argv = ["prepare", "--dataset", "multi30k", "--data-dir", str(data_dir), "--vocab-size", "2000",
            "--out", str(out)]
    assert main(argv) == 0
    first = capsys.readouterr().out
    assert re.search(r"tokenizer: .*tokenizer.json \(trained in [\d.]+ s\); vocabulary size 2,000", first)
    rows = {m[0]: m for m in re.findall(r"^(\w+)(?: \((\w+)\))? +([\d,]+) +([\d,]+) +(\d+) +(\d+) .*s  (\w+)$",
                                         first, flags=re.M)}
    assert set(rows) == {"train", "val", "test"}
    assert rows["test"][1] == "test2016"
    for split, pairs in (("train", "29,000"), ("val", "1,014"), ("test", "1,000")):
        _, _, pairs_in, kept, empty, too_long, how = rows[split]
        assert pairs_in == pairs and how == "encoded"
        assert int(kept.replace(",", "")) + int(empty) + int(too_long) == int(pairs.replace(",", ""))
        assert int(kept.replace(",", "")) > 0.99 * int(pairs.replace(",", ""))
    assert (out / "tokenizer.json").is_file() and len(list((out / "cache").iterdir())) == 3

    assert main(argv) == 0
    second = capsys.readouterr().out
    assert "(loaded)" in second and second.count("  cache") == 3 and "encoded" not in second.split("\n", 2)[2]


def test_prepare_dataset_api_and_local_files(write_lines, tmp_path, data_dir):
    src = write_lines("c.de", ["Ein Hund läuft im Park.", "Eine Katze schläft."] * 50 + [""])
    tgt = write_lines("c.en", ["A dog runs in the park.", "A cat sleeps."] * 50 + ["orphan"])
    data = prepare_dataset(src_file=src, tgt_file=tgt, out_dir=tmp_path / "local", vocab_size=300)
    train, valid = data.splits["train"], data.splits["valid"]
    assert list(data.splits) == ["train", "valid"] and data.tokenizer_trained
    # A tenth of 101 pairs is held out for validation (no validation files were given), the rest is training data.
    assert data.held_out.pairs == valid.stats.pairs_in == 10 and train.stats.pairs_in == 91
    held = sorted(set(range(101)) - set(train.line_index.tolist()) - {100})
    assert len(held) == 10 and train.stats.dropped["empty"] == (100 not in held)
    lines = [("Ein Hund läuft im Park.", "A dog runs in the park."), ("Eine Katze schläft.", "A cat sleeps.")]
    assert list(zip(data.corpora["valid"].source, data.corpora["valid"].target)) == [lines[i % 2] for i in held]
    line = int(train.line_index[1])
    assert data.tokenizer.decode(train.source(1)) == lines[line % 2][0]
    # The same tokenizer encodes another dataset's split (e.g. for evaluation); ids stay within its vocabulary.
    other = prepare_dataset("multi30k", splits=["val"], data_dir=data_dir, out_dir=tmp_path / "eval",
                            tokenizer_path=data.tokenizer_path)
    assert other.tokenizer.fingerprint == data.tokenizer.fingerprint
    assert int(np.max(other.splits["val"].src_ids)) < data.tokenizer.vocab_size


def test_prepare_errors_are_one_line(tmp_path, capsys, data_dir):
    assert main(["prepare", "--dataset", "iwslt", "--data-dir", str(data_dir), "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("vaswani prepare: error: dataset 'iwslt' has no 'train' split") and "\n" not in err
    assert main(["prepare", "--src", str(tmp_path / "missing.de"), "--out", str(tmp_path)]) == 2
    assert "needs both a source file and a target file" in capsys.readouterr().err


def test_prepare_own_files_without_out_as_documented(write_lines, tmp_path, monkeypatch, capsys):
    # docs/training.md: `vaswani prepare --src train.fr --tgt train.en --vocab-size 32000`, no --out: the
    # prepared data goes to runs/data/local-<key>-fr-en-<vocab> below the current folder.
    write_lines("train.fr", ["Un chien court dans le parc.", "Un chat dort."] * 60)
    write_lines("train.en", ["A dog runs in the park.", "A cat sleeps."] * 60)
    monkeypatch.chdir(tmp_path)
    assert main(["prepare", "--src", "train.fr", "--tgt", "train.en", "--vocab-size", "300"]) == 0
    out = capsys.readouterr().out
    (prepared,) = (tmp_path / "runs" / "data").iterdir()
    assert prepared.name.startswith("local-") and prepared.name.endswith("-fr-en-300")
    assert (prepared / "tokenizer.json").is_file()
    assert f"cache: {Path('runs') / 'data' / prepared.name}" in out


def test_prepare_own_files_default_folder_is_checked(write_lines, tmp_path, monkeypatch, capsys):
    # the folder the default lands in must not lie inside something vaswani wrote (here: a checkpoint)
    write_lines("train.fr", ["Un chien court dans le parc."] * 20)
    write_lines("train.en", ["A dog runs in the park."] * 20)
    checkpoint = tmp_path / "ckpt"
    checkpoint.mkdir()
    write_manifest(checkpoint, "checkpoint")
    monkeypatch.chdir(checkpoint)
    assert main(["prepare", "--src", str(tmp_path / "train.fr"), "--tgt", str(tmp_path / "train.en")]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "the default folder runs/data lies inside" in err and "checkpoint" in err
    assert sorted(p.name for p in checkpoint.iterdir()) == ["vaswani.json"]
