"""Training on the user's own files, end to end as a user types it: Multi30k en→de named as files (train, finalize,
evaluate, translate, what the server reports, resume refused on changed files), a synthetic pair in another
script, a YAML preset that describes a whole experiment, and WMT17 from local copies of its training corpora."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import shutil
import sys
from pathlib import Path

import pytest

from vaswani.cli import main
from vaswani.evaluation.checkpoint_info import checkpoint_info

FAST = ["--set", "train.max_steps=6", "--set", "train.eval_every_steps=3", "--set", "train.bleu_subset=4",
        "--set", "train.progress=false", "--set", "train.log_every_steps=3"]
FINAL = ["--set", "train.final_model=true", "--set", "train.final_valid_sentences=16", "--set", "train.final_beam=2",
         "--set", "train.final_alphas=[1.0]", "--set", "train.final_max_minutes=0.5"]


@pytest.fixture(autouse=True)
def offline_cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("VASWANI_CACHE", str(tmp_path_factory.mktemp("vaswani-cache")))
    monkeypatch.setenv("VASWANI_MIRROR", "http://127.0.0.1:9")


@pytest.fixture(scope="module")
def multi30k() -> Path:
    folder = Path(os.environ.get("VASWANI_DATA", Path(__file__).resolve().parents[2].parent / "shared" / "data"))
    folder = folder / "multi30k"
    if not (folder / "train.en.gz").is_file():
        pytest.skip(f"Multi30k not found in {folder} (set VASWANI_DATA)")
    return folder


def run(capsys, *argv) -> tuple[int, str, str]:
    code = main([str(a) for a in argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.fixture(scope="module")
def en_de_run(multi30k, tmp_path_factory) -> Path:
    """A smoke-sized run on Multi30k en→de, the files named on the command line, with its final model."""
    work = tmp_path_factory.mktemp("en-de")
    run_dir = work / "run"
    argv = ["train", "--preset", "smoke", "--run-dir", run_dir,
            "--src", multi30k / "train.en.gz", "--tgt", multi30k / "train.de.gz",
            "--valid-src", multi30k / "val.en.gz", "--valid-tgt", multi30k / "val.de.gz",
            "--test-src", multi30k / "test_2016_flickr.en.gz", "--test-tgt", multi30k / "test_2016_flickr.de.gz",
            *FAST, *FINAL]
    cwd = Path.cwd()
    os.chdir(work)  # the prepared data goes to ./runs/data
    try:
        assert main([str(a) for a in argv]) == 0
    finally:
        os.chdir(cwd)
    return run_dir


def test_a_run_on_files_records_them_and_its_final_model_is_scored_on_their_test_set(en_de_run, multi30k):
    corpus = json.loads((en_de_run / "corpus.json").read_text())
    assert corpus["dataset"] == "local" and corpus["languages"]["name"] == "English → German"
    train_files = corpus["splits"]["train"]["files"]
    assert [f["path"] for f in train_files] == [str(multi30k / "train.en.gz"), str(multi30k / "train.de.gz")]
    assert [f["lines"] for f in train_files] == [29_000, 29_000]
    assert train_files[0]["sha256"] == hashlib.sha256((multi30k / "train.en.gz").read_bytes()).hexdigest()
    assert corpus["splits"]["valid"]["pairs"] == 1014 and corpus["splits"]["valid"]["held_out"] is None
    selection = json.loads((en_de_run / "checkpoints" / "final" / "selection.json").read_text())
    assert selection["languages"]["source"] == "en" and selection["valid_split"] == "valid"
    assert list(selection["test"]) == ["local-test_2016_flickr"] and selection["test"]["local-test_2016_flickr"][
        "sentences"] == 1000


def test_the_run_translates_evaluates_and_is_served_as_english_to_german(en_de_run, multi30k, tmp_path, capsys,
                                                                           monkeypatch):
    source = tmp_path / "in.en"
    source.write_text("A dog runs in the snow.\nTwo men play football.\n")
    code, out, err = run(capsys, "translate", "--checkpoint", en_de_run, "--input", source, "--beam", "1",
                         "--engine", "torch", "--device", "cpu")
    assert code == 0 and len(out.splitlines()) == 2, err
    code, out, err = run(capsys, "evaluate", "--checkpoint", en_de_run, "--src", multi30k / "test_2016_flickr.en.gz",
                         "--ref", multi30k / "test_2016_flickr.de.gz", "--beam", "1", "--engine", "torch",
                         "--out", tmp_path / "eval", "--json")
    assert code == 0, err
    results = json.loads(out)
    assert results["languages"] == {"source": "en", "target": "de", "name": "English → German"}
    assert results["sentences"] == 1000 and results["bleu"] >= 0
    assert "- languages: English → German" in (tmp_path / "eval" / "report.md").read_text()
    assert checkpoint_info(en_de_run / "checkpoints" / "final").languages["name"] == "English → German"

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    monkeypatch.setattr(sys, "stdin", Terminal(""))  # typed at a terminal: the prompt names the source language
    code, _, err = run(capsys, "translate", "--checkpoint", en_de_run, "--engine", "torch", "--device", "cpu")
    assert code == 0 and "Type an English sentence" in err


def test_the_run_exports_to_transformers_with_its_tokenizer_and_its_logits(en_de_run, tmp_path, capsys):
    """The English → German model as a MarianMT model: the same ids for English text, and the same logits for a
    German continuation (fp32, CPU, within 1e-4)."""
    transformers = pytest.importorskip("transformers")
    import torch

    from vaswani.data.tokenizer import Tokenizer
    from vaswani.model.serialization import load_model, resolve_checkpoint

    out = tmp_path / "hf"
    code, _, err = run(capsys, "export", "--checkpoint", en_de_run, "--format", "hf", "--out", out)
    assert code == 0, err
    hf_model = transformers.MarianMTModel.from_pretrained(out).eval()
    hf_tokenizer = transformers.AutoTokenizer.from_pretrained(out)
    final = resolve_checkpoint(en_de_run)
    ours = Tokenizer.load(final / "tokenizer.json")
    english, german = "A dog runs in the snow.", "Ein Hund läuft im Schnee."
    src = torch.tensor([ours.encode(english) + [ours.eos_id]])
    assert hf_tokenizer([english], return_tensors="pt")["input_ids"].tolist() == src.tolist()
    tgt = torch.tensor([[ours.bos_id] + ours.encode(german)])
    model = load_model(final).eval()
    with torch.no_grad():
        difference = model(src, tgt) - hf_model(input_ids=src, decoder_input_ids=tgt).logits
    assert difference.abs().max().item() < 1e-4


def test_finalize_scores_more_test_files_of_the_run(en_de_run, multi30k, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # elsewhere than the run was trained: its prepared data is found through corpus.json
    code, _, err = run(capsys, "finalize", "--run-dir", en_de_run, "--test-src", multi30k / "test_2017_flickr.en.gz",
                       "--test-tgt", multi30k / "test_2017_flickr.de.gz", "--set", "train.final_max_minutes=0.5")
    assert code == 0, err
    assert not (tmp_path / "runs").exists()  # nothing prepared again
    selection = json.loads((en_de_run / "checkpoints" / "final" / "selection.json").read_text())
    assert sorted(selection["test"]) == ["local-test_2016_flickr", "local-test_2017_flickr"]
    code, _, err = run(capsys, "finalize", "--run-dir", en_de_run, "--src-lang", "fr")
    assert code == 2 and "a run keeps the corpus it was trained on: only test sets" in err


def test_resuming_on_changed_files_is_refused_in_one_line(multi30k, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    src, tgt = tmp_path / "train.en", tmp_path / "train.de"
    for path, name in ((src, "train.en.gz"), (tgt, "train.de.gz")):
        path.write_bytes(b"".join(gzip.decompress((multi30k / name).read_bytes()).splitlines(keepends=True)[:1000]))
    argv = ["train", "--preset", "smoke", "--run-dir", tmp_path / "run", "--src", src, "--tgt", tgt, *FAST]
    code, _, err = run(capsys, *argv)
    assert code == 0, err
    assert "validation: 100 pairs held out of the" in err  # no validation files: the command says what it did
    src.write_bytes(src.read_bytes().replace(b"dog", b"cat"))  # same path, same line count, other content
    code, _, err = run(capsys, "train", "--resume", "--run-dir", tmp_path / "run", "--set", "train.max_steps=8")
    errors = [line for line in err.splitlines() if line.startswith("vaswani train: error: ")]
    assert code == 2 and len(errors) == 1 and errors[0] == err.strip().splitlines()[-1], err
    assert f"{src} changed since this run started" in errors[0] and "start a new run" in errors[0]
    assert len(list((tmp_path / "runs" / "data").iterdir())) == 1  # refused before anything was prepared


GREEK = dict(zip("abcdefghijklmnopqrstuvwxyz", "αβψδεφγηιξκλμνοπqρστθωςχυζ"))


def test_a_synthetic_pair_in_another_script_trains_and_translates(multi30k, tmp_path, capsys, monkeypatch):
    """Greek letters for English ones (el) → English: another script on the source side, languages from the files'
    suffixes, validation held out."""
    monkeypatch.chdir(tmp_path)
    english = gzip.decompress((multi30k / "train.en.gz").read_bytes()).decode().splitlines()[:3000]
    greek = ["".join(GREEK.get(c, c) for c in line.lower()) for line in english]
    (tmp_path / "synthetic.el").write_text("\n".join(greek) + "\n")
    (tmp_path / "synthetic.en").write_text("\n".join(english) + "\n")
    code, _, err = run(capsys, "train", "--preset", "smoke", "--run-dir", tmp_path / "run",
                       "--src", tmp_path / "synthetic.el", "--tgt", tmp_path / "synthetic.en", *FAST)
    assert code == 0, err
    corpus = json.loads((tmp_path / "run" / "corpus.json").read_text())
    assert corpus["languages"]["name"] == "Greek → English" and corpus["splits"]["valid"]["held_out"]["pairs"] == 300
    from vaswani.data.tokenizer import Tokenizer

    tokenizer = Tokenizer.load(tmp_path / "run" / "tokenizer.json")
    assert tokenizer.decode(tokenizer.encode(greek[0])) == greek[0] and len(tokenizer.encode(greek[0])) < len(greek[0])
    (tmp_path / "in.el").write_text("\n".join(greek[:3]) + "\n")
    code, out, err = run(capsys, "translate", "--checkpoint", tmp_path / "run", "--input", tmp_path / "in.el",
                         "--beam", "1", "--engine", "torch", "--device", "cpu")
    assert code == 0 and len(out.splitlines()) == 3, err


def test_a_yaml_preset_describes_the_whole_experiment(multi30k, tmp_path, capsys):
    preset = tmp_path / "experiment.yaml"
    preset.write_text(f"""
model: {{preset: tiny}}
data:
  dataset: local
  direction: en-de
  vocab_size: 500
  train_files: [[{multi30k / 'train.en.gz'}, {multi30k / 'train.de.gz'}]]
  valid_files: [{multi30k / 'val.en.gz'}, {multi30k / 'val.de.gz'}]
  test_files: {{flickr2016: [{multi30k / 'test_2016_flickr.en.gz'}, {multi30k / 'test_2016_flickr.de.gz'}]}}
train: {{max_steps: 2, final_test_splits: [flickr2016]}}
""")
    code, out, err = run(capsys, "train", "--preset", preset, "--print-config")
    assert code == 0, err
    assert "train_files:\n  - - " in out and "flickr2016:" in out and "direction: en-de" in out
    preset.write_text(preset.read_text().replace("direction: en-de", "direction: fr-de"))
    code, _, err = run(capsys, "train", "--preset", preset, "--print-config")
    assert code == 2 and "data.direction=fr-de but the files" in err and "are named en-de" in err
    preset.write_text(preset.read_text().replace("direction: fr-de", "direction: en-de").replace(
        "final_test_splits: [flickr2016]", "final_test_splits: [newstest]"))
    code, _, err = run(capsys, "train", "--preset", preset, "--print-config")
    assert code == 2 and "'newstest' is not a test set of data.test_files (flickr2016)" in err


def test_wmt17_trains_from_local_copies_of_its_training_corpora(tmp_path, multi30k, monkeypatch):
    """The wmt17 dataset reads DATA/wmt17_de_en/train/ when its files are there (here: Multi30k lines standing in
    for the four corpora), streamed like the user's own files, and never asks the hub."""
    from vaswani.data import corpora
    from vaswani.data.pipeline import prepare_dataset

    shared = multi30k.parent / "wmt17_de_en"
    data = tmp_path / "data"
    (data / "wmt17_de_en" / "train").mkdir(parents=True)
    for name in ("newstest2016", "newstest2017"):
        for lang in ("de", "en"):
            shutil.copy(shared / f"{name}.{lang}", data / "wmt17_de_en")
    for i, stem in enumerate(corpora.WMT17_TRAIN_FILES):
        for lang in ("de", "en"):
            lines = gzip.decompress((multi30k / f"train.{lang}.gz").read_bytes()).splitlines()[500 * i: 500 * i + 500]
            (data / "wmt17_de_en" / "train" / f"{stem}.{lang}.gz").write_bytes(gzip.compress(b"\n".join(lines)))
    monkeypatch.setattr(corpora, "load_wmt17_train", lambda *a: pytest.fail("the hub was asked"))
    prepared = prepare_dataset("wmt17", splits=("train", "newstest2016"), data_dir=data, out_dir=tmp_path / "out",
                               vocab_size=500)
    assert prepared.splits["train"].stats.pairs_in == 2000 and prepared.held_out is None
    assert [Path(f.path).name for f in prepared.files["train"].files][:2] == ["europarl-v7.de-en.de.gz",
                                                                             "europarl-v7.de-en.en.gz"]
    assert prepared.corpora["newstest2016"].source[0] == (shared / "newstest2016.de").read_text().split("\n")[0]
    (data / "wmt17_de_en" / "train" / "rapid2016.de-en.en.gz").unlink()
    with pytest.raises(Exception, match=r"holds some of the WMT17 training corpora but not rapid2016.de-en.en"):
        prepare_dataset("wmt17", splits=("train", "newstest2016"), data_dir=data, out_dir=tmp_path / "out2",
                        vocab_size=500)
