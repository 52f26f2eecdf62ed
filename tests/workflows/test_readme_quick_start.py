"""The README's quick start for improving a model, run as written (with a tiny parent and tiny files under the
names it uses, and settings that make training take seconds): fine-tuning a run on new files with --init-from,
and back-translating monolingual text with a reverse model."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

from vaswani.cli import main

README = Path(__file__).resolve().parents[2] / "README.md"
SECONDS = ["--set", "train.max_steps=2", "--set", "train.eval_every_steps=2", "--set", "train.bleu_subset=0",
           "--set", "train.progress=false", "--set", "train.precision=fp32", "--set", "train.device=cpu",
           "--set", "train.max_tokens=400", "--set", "train.max_minutes=null", "--set", "train.decay_on_clock=false",
           "--set", "train.final_model=false"]


def readme_command(start: str) -> list[str]:
    """The README's command line that starts with ``start``, as words (its comment left out)."""
    line = next(line for line in README.read_text(encoding="utf-8").splitlines() if line.startswith(start))
    return shlex.split(re.sub(r"\s+#.*$", "", line))[1:]  # without the program's name


def write_pairs(folder: Path, stem: str, languages: tuple[str, str], count: int, offset: int = 0) -> None:
    words = {"de": ("ein hund", "nummer"), "en": ("a dog", "number")}
    for language in languages:
        animal, number = words[language]
        (folder / f"{stem}.{language}").write_text(
            "".join(f"{animal} {number} {i}\n" for i in range(offset, offset + count)), encoding="utf-8")


def test_the_readme_fine_tunes_a_run_and_back_translates_text_as_written(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    write_pairs(tmp_path, "train", ("de", "en"), 120)
    tiny = ["--preset", "smoke", "--set", "data.vocab_size=300", *SECONDS]
    assert main(["train", *tiny, "--run-dir", "runs/multi30k-cpu", "--src", "train.de", "--tgt", "train.en"]) == 0
    assert main(["train", *tiny, "--run-dir", "runs/en-de", "--src", "train.en", "--tgt", "train.de"]) == 0
    write_pairs(tmp_path, "news", ("de", "en"), 60, offset=500)
    write_pairs(tmp_path, "mono", ("en",), 30, offset=900)
    capsys.readouterr()

    fine_tune = readme_command("vaswani train --preset multi30k-cpu --run-dir runs/news --init-from")
    assert main([*fine_tune, *SECONDS]) == 0, capsys.readouterr().err
    assert (tmp_path / "runs" / "news" / "checkpoints" / "last").exists()
    assert "runs/multi30k-cpu" in (tmp_path / "runs" / "news" / "config.yaml").read_text()  # its parent

    backtranslate = readme_command("vaswani backtranslate")
    assert main(backtranslate) == 0, capsys.readouterr().err
    corpus = tmp_path / "synthetic" / "bt"
    assert (corpus / "backtranslated.en").read_text() == (tmp_path / "mono.en").read_text()
    assert len((corpus / "backtranslated.de").read_text().splitlines()) == 30
