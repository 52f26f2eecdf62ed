"""What the studies of the data loop share: their corpus files and presets, and one score per run.

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

from vaswani.experiments.reporting import fixed, log, markdown_table, pyplot
from vaswani.experiments.variants import load_final_model
from vaswani.io import atomic_write_text
from vaswani.training.config import RunConfig
from vaswani.training.presets import apply_settings, load_preset
from vaswani.training.scoring import greedy_scores

TEST_SETS = ("test2016", "test2017")


def write_lines(path: Path, lines: Sequence[str]) -> None:
    """``lines`` as a text file, left untouched when it holds them already (a rerun reuses the study's runs)."""
    text = "".join(line + "\n" for line in lines)
    if not path.is_file() or path.read_text(encoding="utf-8") != text:
        atomic_write_text(path, text)


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


def score_last_weights(run_dir: Path, variant: str, seed: int, tests: dict[str, tuple[list[str], list[str]]],
                       device) -> VariantResult:
    """Greedy BLEU of the run's last weights on each test set (``name -> (sources, references)``)."""
    model, tokenizer = load_final_model(run_dir, device)
    bleu = {name: greedy_scores(model, tokenizer, sources, references, device, "fp32")[0].bleu
            for name, (sources, references) in tests.items()}
    log(f"  {variant}-seed{seed}: " + ", ".join(f"{name} {value:.2f}" for name, value in bleu.items()))
    return VariantResult(variant, seed, bleu)


def summarize_variants(results: Sequence[VariantResult]) -> list[dict]:
    """One row a variant: the mean BLEU over its seeds on each test set, and the spread (max − min)."""
    rows = []
    for name in dict.fromkeys(r.variant for r in results):
        runs = [r for r in results if r.variant == name]
        row = {"variant": name, "seeds": len(runs)}
        for test in TEST_SETS:
            values = [r.bleu[test] for r in runs]
            row[test] = statistics.fmean(values)
            row[f"{test}_spread"] = max(values) - min(values)
        rows.append(row)
    return rows


def variants_table(rows: Sequence[dict], first_column: str) -> str:
    """The rows of :func:`summarize_variants` as a markdown table."""
    headers = [first_column, "seeds", *(f"{test} BLEU" for test in TEST_SETS),
               *(f"{test} spread" for test in TEST_SETS)]
    body = [[row["variant"], row["seeds"], *(fixed(row[test]) for test in TEST_SETS),
             *(fixed(row[f"{test}_spread"]) for test in TEST_SETS)] for row in rows]
    return markdown_table(headers, body)


def variants_plot(rows: Sequence[dict], title: str):
    """Test BLEU of each variant, a pair of bars a variant."""
    plt = pyplot()
    figure, axis = plt.subplots(figsize=(9, 4))
    positions = np.arange(len(rows))
    for offset, test in zip((-0.2, 0.2), TEST_SETS):
        axis.bar(positions + offset, [row[test] for row in rows], width=0.4, label=test)
    axis.set_xticks(positions, [row["variant"] for row in rows], rotation=20)
    axis.set(ylabel="greedy BLEU (mean over seeds)", title=title)
    axis.legend()
    return figure


__all__ = ["TEST_SETS", "VariantResult", "score_last_weights", "study_preset", "summarize_variants",
           "variants_plot", "variants_table", "write_lines"]
