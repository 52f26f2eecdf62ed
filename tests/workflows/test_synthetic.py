"""`vaswani backtranslate` and `vaswani distill`: the translation on the right side of the pair, a stopped run
continued into the same corpus as an uninterrupted one, another plan refused rather than mixed in, and text in
the wrong language refused by its name. On the torch engine in float32 on the CPU, a random tiny model."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from vaswani.cli import main
from vaswani.data.textfiles import read_text_file
from vaswani.decoding.config import EngineOptions, SearchConfig
from vaswani.decoding.translator import Translator
from vaswani.errors import VaswaniError
from vaswani.workflows.synthetic import SyntheticPlan, made_by, parts_folder, translate_corpus

ENGINE = ["--engine", "torch", "--device", "cpu", "--precision", "fp32"]


@pytest.fixture
def german(tmp_path: Path, test_pairs) -> Path:
    path = tmp_path / "mono.de"
    path.write_text("".join(line + "\n" for line in test_pairs[0]), encoding="utf-8")
    return path


@pytest.fixture
def run_checkpoint(tmp_path: Path, tiny_checkpoint: Path) -> Path:
    """The tiny checkpoint inside a run that records its languages, German to English."""
    run = tmp_path / "run"
    shutil.copytree(tiny_checkpoint, run / "checkpoints" / "step_0000001")
    (run / "corpus.json").write_text(json.dumps({"languages": {"source": "de", "target": "en"}}))
    return run / "checkpoints" / "step_0000001"


def test_a_stopped_translation_continues_into_the_corpus_an_uninterrupted_one_writes(tiny_checkpoint: Path,
                                                                                    german: Path,
                                                                                    tmp_path: Path) -> None:
    search = SearchConfig(sample=True, beam_size=1, seed=3, max_len_a=1.0, max_len_b=5)
    translator = Translator.load(tiny_checkpoint, search, EngineOptions(engine="torch", device="cpu"))
    text = read_text_file(german)
    plan = SyntheticPlan("model", text.sha256, len(text.lines), "sampled", chunk_lines=6)
    names = ("bt.en", "bt.de")
    whole = translate_corpus(text, translator.translate, plan, tmp_path / "whole", names, True, "backtranslate")

    calls = []

    def stopped_after_two_chunks(lines):
        calls.append(len(lines))
        if len(calls) == 3:
            raise KeyboardInterrupt
        return translator.translate(lines)

    out = tmp_path / "continued"
    with pytest.raises(KeyboardInterrupt):
        translate_corpus(text, stopped_after_two_chunks, plan, out, names, True, "backtranslate")
    assert not out.exists() and len(list(parts_folder(out).glob("0*.txt"))) == 2
    with pytest.raises(VaswaniError, match="chunks of another translation"):
        translate_corpus(text, translator.translate, SyntheticPlan("model", text.sha256, len(text.lines), "beam", 6),
                         out, names, True, "backtranslate")
    continued = translate_corpus(text, translator.translate, plan, out, names, True, "backtranslate")
    assert continued.chunks_reused == 2 and not parts_folder(out).exists()
    for name in names:
        assert (out / name).read_text() == (whole.source_file.parent / name).read_text()
    assert (out / "bt.de").read_text().splitlines() == text.lines  # back-translation: the original is the target
    assert len((out / "bt.en").read_text().splitlines()) == len(text.lines)


def test_distill_keeps_the_source_and_writes_the_teachers_translation_named_by_language(run_checkpoint: Path,
                                                                                      german: Path, tmp_path: Path,
                                                                                      capsys) -> None:
    out = tmp_path / "student-data"
    assert main(["distill", "--teacher", str(run_checkpoint), "--input", str(german), "--out", str(out),
                 "--beam", "2", "--max-len-a", "1", "--max-len-b", "5", *ENGINE]) == 0
    assert (out / "distilled.de").read_text() == german.read_text()
    translations = (out / "distilled.en").read_text().splitlines()
    reference = Translator.load(run_checkpoint, SearchConfig(beam_size=2, max_len_a=1.0, max_len_b=5, precision="fp32"),
                                EngineOptions(engine="torch", device="cpu"))
    assert translations == [line.replace("\n", " ") for line in reference.translate(german.read_text().splitlines())]
    assert f"--src {out / 'distilled.de'} --tgt {out / 'distilled.en'}" in capsys.readouterr().out
    manifest = json.loads((out / "vaswani.json").read_text())
    assert manifest["kind"] == "synthetic corpus"

    # A study reuses the corpus only for the weights that translated it.
    assert made_by(out, run_checkpoint) and not made_by(tmp_path / "none", run_checkpoint)
    other = tmp_path / "other"
    shutil.copytree(run_checkpoint, other)
    weights = other / "model.safetensors"
    weights.write_bytes(weights.read_bytes() + b" ")
    with pytest.raises(VaswaniError, match="holds translations by other weights"):
        made_by(out, other)


def test_text_in_another_language_than_the_model_reads_is_refused_in_one_line(run_checkpoint: Path, tmp_path: Path,
                                                                             german: Path, capsys) -> None:
    english = tmp_path / "mono.en"
    english.write_text("A man walks.\n")
    assert main(["backtranslate", "--checkpoint", str(run_checkpoint), "--input", str(english), "--out",
                 str(tmp_path / "bt"), *ENGINE]) == 2
    error = capsys.readouterr().err.strip()
    assert "is English by its name, but the model translates from German into English" in error
    assert len(error.splitlines()) == 1 and not (tmp_path / "bt").exists()
    assert main(["backtranslate", "--checkpoint", str(run_checkpoint), "--input", str(german), "--out",
                 str(run_checkpoint / "bt"), *ENGINE]) == 2  # an output inside its model
    assert "--out" in capsys.readouterr().err and not (run_checkpoint / "bt").exists()
