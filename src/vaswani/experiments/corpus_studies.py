"""What the studies of the data loop share: their corpora, files and presets, one score per run, one row a variant.

Each study (back-translation, distillation, cleaning) trains German-English models on files it writes under its
``--runs-dir``, from a preset of its own (:func:`study_preset`), and reads each finished run the same way: greedy
BLEU of the run's last weights on Multi30k test2016 and test2017, the mean over seeds and the spread.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from vaswani.data.corpora import ParallelCorpus, load_corpus
from vaswani.experiments.reporting import fixed, log, markdown_table, pyplot
from vaswani.experiments.variants import TrainedRun, load_final_model
from vaswani.io import atomic_write_text
from vaswani.training.config import RunConfig
from vaswani.training.presets import apply_settings, load_preset
from vaswani.training.scoring import greedy_scores

TEST_SETS = ("test2016", "test2017")
TestSets = dict[str, tuple[list[str], list[str]]]  # a test set's name -> (its sources, their references)
SMOKE_TEST_LINES = 8  # --smoke: the first lines of each test set only


def write_lines(path: Path, lines: Sequence[str]) -> None:
    """``lines`` as a text file, left untouched when it holds them already (a rerun reuses the study's runs)."""
    text = "".join(line + "\n" for line in lines)
    if not path.is_file() or path.read_text(encoding="utf-8") != text:
        atomic_write_text(path, text)


def study_corpora(data_dir: Path | None, folder: Path, smoke_pairs: int | None) -> tuple[ParallelCorpus, TestSets]:
    """Multi30k's German-English training pairs and its test sets' text, its validation pairs written to ``folder``
    (val.de, val.en; the folder made when missing); under --smoke (``smoke_pairs`` given), the first ``smoke_pairs``
    validation pairs and :data:`SMOKE_TEST_LINES` of each test set only."""
    train, val, *tests = (load_corpus("multi30k", split, "de-en", data_dir=data_dir)
                          for split in ("train", "val", *TEST_SETS))
    folder.mkdir(parents=True, exist_ok=True)
    write_lines(folder / "val.de", val.source[:smoke_pairs])
    write_lines(folder / "val.en", val.target[:smoke_pairs])
    lines = SMOKE_TEST_LINES if smoke_pairs else None
    return train, {name: (test.source[:lines], test.target[:lines]) for name, test in zip(TEST_SETS, tests)}


def study_preset(base: str, extra: Sequence[str], out: Path, direction: str, parts: Sequence[Sequence[Path]],
                 valid: Sequence[Path], tags: Sequence[str] = ()) -> str:
    """A preset file for runs on these files: ``base`` with ``extra`` and its data section on the files."""
    import yaml

    config = json.loads(json.dumps(apply_settings(load_preset(base), list(extra)).to_dict()))
    config["data"].update(dataset="local", direction=direction, train_files=[[str(p) for p in part] for part in parts],
                          train_tags=list(tags), valid_files=[str(p) for p in valid], test_files={})
    config["train"]["final_test_splits"] = []  # the study scores the test sets itself, from the dataset
    RunConfig.from_dict(config)  # refused here, before any run trains, when it would be
    atomic_write_text(out, yaml.safe_dump(config, sort_keys=False))
    return str(out)


@dataclass
class VariantResult:
    """One trained run: its variant, seed and greedy BLEU of its last weights on each test set."""

    variant: str
    seed: int
    bleu: dict[str, float]


def score_last_weights(run: TrainedRun, tests: TestSets, device) -> VariantResult:
    """Greedy BLEU of the run's last weights on each test set; a study's run sets its seed first (train.seed=N)."""
    seed = int(run.variant.settings[0].split("=")[1])
    model, tokenizer = load_final_model(run.run_dir, device)
    bleu = {name: greedy_scores(model, tokenizer, sources, references, device, "fp32")[0].bleu
            for name, (sources, references) in tests.items()}
    log(f"  {run.variant.label}-seed{seed}: " + ", ".join(f"{name} {value:.2f}" for name, value in bleu.items()))
    return VariantResult(run.variant.label, seed, bleu)


@dataclass
class VariantSummary:
    """One variant's row: the mean BLEU over its seeds on each test set, and the spread (max − min; None for a
    single seed, which has none to show)."""

    variant: str
    seeds: int
    bleu: dict[str, float]
    spread: dict[str, float | None]

    def to_json(self) -> dict[str, str | int | float | None]:
        """The row as results.json holds it: each test set's mean, its spread beside it."""
        row: dict[str, str | int | float | None] = {"variant": self.variant, "seeds": self.seeds}
        for test, bleu in self.bleu.items():
            row |= {test: bleu, f"{test}_spread": self.spread[test]}
        return row


def summarize_variants(results: Sequence[VariantResult]) -> list[VariantSummary]:
    """One row a variant, in the order the variants first come in ``results``."""
    rows = []
    for name in dict.fromkeys(r.variant for r in results):
        bleu = {test: [r.bleu[test] for r in results if r.variant == name] for test in TEST_SETS}
        rows.append(VariantSummary(name, len(bleu[TEST_SETS[0]]), {t: statistics.fmean(v) for t, v in bleu.items()},
                                   {t: max(v) - min(v) if len(v) > 1 else None for t, v in bleu.items()}))
    return rows


def variants_table(rows: Sequence[VariantSummary], first_column: str, spread: bool = True,
                   more: dict[str, list[str]] | None = None) -> str:
    """The rows as a markdown table: each test set's mean BLEU, its spread (unless ``spread`` is false), then the
    columns of ``more`` (a header -> a cell a row)."""
    more = more or {}
    headers = [first_column, "seeds", *(f"{test} BLEU" for test in TEST_SETS),
               *(f"{test} spread" for test in TEST_SETS if spread), *more]
    body = [[row.variant, row.seeds, *(fixed(row.bleu[test]) for test in TEST_SETS),
             *(fixed(row.spread[test]) for test in TEST_SETS if spread), *(cells[i] for cells in more.values())]
            for i, row in enumerate(rows)]
    return markdown_table(headers, body)


def variants_plot(rows: Sequence[VariantSummary], title: str):
    """Test BLEU of each variant, a pair of bars a variant."""
    plt = pyplot()
    figure, axis = plt.subplots(figsize=(9, 4))
    positions = np.arange(len(rows))
    for offset, test in zip((-0.2, 0.2), TEST_SETS):
        axis.bar(positions + offset, [row.bleu[test] for row in rows], width=0.4, label=test)
    axis.set_xticks(positions, [row.variant for row in rows], rotation=20)
    axis.set(ylabel="greedy BLEU (mean over seeds)", title=title)
    axis.legend()
    return figure


__all__ = ["SMOKE_TEST_LINES", "TEST_SETS", "TestSets", "VariantResult", "VariantSummary", "score_last_weights",
           "study_corpora", "study_preset", "summarize_variants", "variants_plot", "variants_table", "write_lines"]
