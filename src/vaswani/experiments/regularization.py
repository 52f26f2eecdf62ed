"""`vaswani experiment regularization`: what lets each model of multi30k-cpu improve with the epochs it is given.

The clock fit (training/budget.py) trains a wider model where the machine is fast enough; a wider model with the
same regularization memorises Multi30k's 29k pairs (validation NLL lowest at a third of the run, then rising). This
study trains each cell (a width with a regularization: dropout, attention dropout, label smoothing, BPE vocabulary,
subword splitting) for the preset's whole schedule, the same number of epochs for every cell and no clock, so a
cell's result does not depend on how fast or loaded the machine was. Each run is read by what the run itself chose
it on:

    per epoch      validation NLL (whole split) and greedy BLEU on the preset's validation subset (the curves)
    at the end     greedy BLEU on the whole validation split of the last weights, and how far the last NLL is
                   above the run's minimum (a model that keeps improving ends at its minimum)

Test sets are never read. Cells with several seeds report the mean and the spread; the spread of the preset's
own cell over seeds is the noise every difference is read against.
"""

from __future__ import annotations

import argparse
import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from vaswani.arguments import ranged
from vaswani.data.corpora import load_corpus
from vaswani.devices import resolve_device
from vaswani.errors import ConfigError
from vaswani.experiments.reporting import (
    device_label,
    fixed,
    log,
    markdown_table,
    provenance_line,
    pyplot,
    write_results,
)
from vaswani.experiments.variants import (
    RunVariant,
    add_runs_arguments,
    load_final_model,
    metrics,
    runs_as_they_stand,
    train_variants,
    variant_config,
)
from vaswani.settings import MAX_COUNT
from vaswani.training.presets import load_preset
from vaswani.training.scoring import greedy_scores

RECIPE, SMOKE_RECIPE = "multi30k-cpu", "smoke"
# Every cell: the preset's schedule by epochs (no clock, no clock fit), no early stop and no final-model step, in
# float32 whatever the CPU (the study compares regularization, not precision).
STUDY_SETTINGS = ("train.scale_up_models=", "train.max_minutes=null", "train.decay_on_clock=false",
                  "train.patience=null", "train.final_model=false", "train.progress=false", "train.precision=fp32")
SMOKE_SETTINGS = ("train.max_steps=6", "train.eval_every_steps=3", "train.bleu_subset=4")

# The widths the clock fit chooses from (multi30k-cpu's model and its train.scale_up_models entries).
WIDTHS: dict[str, tuple[str, ...]] = {
    "d128": (),
    "d192": ("model.d_model=192", "model.d_ff=768", "train.lr=0.0013"),
    "d256": ("model.d_model=256", "model.d_ff=1024", "train.lr=0.001"),
}
# What a cell may change, by its short name in the cell's name.
KNOBS = {"drop": "model.dropout", "attn": "model.attention_dropout", "ls": "train.label_smoothing",
         "v": "data.vocab_size", "wd": "train.weight_decay", "split": "data.subword_split"}


@dataclass(frozen=True)
class Cell:
    """One width with one regularization, e.g. ``d128-drop0.3-ls0.2``: the name says every setting it changes."""

    name: str

    @property
    def settings(self) -> tuple[str, ...]:
        width, *knobs = self.name.split("-")
        if width not in WIDTHS:
            raise ConfigError(f"cell {self.name!r}: starts with a width, one of {', '.join(WIDTHS)}")
        items = list(WIDTHS[width])
        for knob in knobs:
            key = next((k for k in sorted(KNOBS, key=len, reverse=True) if knob.startswith(k)), None)
            if key is None or not _is_number(knob[len(key):]):
                raise ConfigError(f"cell {self.name!r}: {knob!r} is not one of {', '.join(k + 'VALUE' for k in KNOBS)}")
            items.append(f"{KNOBS[key]}={knob[len(key):]}")
        return tuple(items)

    @property
    def width(self) -> str:
        return self.name.split("-")[0]


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


# The grid, in the order it is worth training: the preset's own cell first (with its seed spread), then dropout for
# each width, then the other knobs at the dropout that suits the preset's width.
GRID = ("d128", "d128-drop0.2", "d128-drop0.3", "d128-drop0.2-attn0.1", "d128-drop0.2-ls0.2",
        "d128-drop0.2-v6000", "d192-drop0.3", "d256-drop0.3", "d256-drop0.3-attn0.1")
SMOKE_GRID = ("d128", "d128-drop0.3")


@dataclass
class RunResult:
    """One trained run of a cell: its curves and what its last weights score on the whole validation split."""

    cell: str
    seed: int
    epochs: float
    updates: int
    best_nll: float
    best_nll_epoch: float
    last_nll: float
    val_bleu: float  # greedy, whole validation split, last weights
    curve: list[tuple[float, float, float | None]]  # (epoch, val NLL, subset BLEU) per evaluation
    finished: bool = True  # False: read with --as-they-stand while still training (its last checkpoint)

    @property
    def last_above_best(self) -> float:
        """How far the last NLL is above the run's minimum, as a fraction of the minimum."""
        return self.last_nll / self.best_nll - 1


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--cells", nargs="+", default=None, metavar="CELL",
                        help=f"cells to train and report (default: {' '.join(GRID)}); a cell is a width "
                        f"({', '.join(WIDTHS)}) followed by -KNOBVALUE items, e.g. d192-drop0.3-ls0.2")
    parser.add_argument("--seeds", nargs="+", type=ranged(int, ge=0, le=MAX_COUNT), default=[0],
                        help="seeds every cell is trained with (default 0)")
    parser.add_argument("--as-they-stand", action="store_true",
                        help="train nothing: report the runs under --runs-dir as they stand, a run still training "
                        "or cut off scored at its last checkpoint and marked in progress (interim results)")
    add_runs_arguments(parser, "runs/experiments/regularization", "train.max_epochs=30")


def study_variants(cells: Sequence[str], seeds: Sequence[int]) -> list[RunVariant]:
    """One run per cell and seed, named ``CELL-seedK``."""
    return [RunVariant(f"{name}-seed{seed}", name, (*Cell(name).settings, f"train.seed={seed}"))
            for name in cells for seed in seeds]


def study_settings(smoke: bool, settings: Sequence[str]) -> list[str]:
    """Every run's settings past its variant's; runs trained at once share the cores (variants.threads_per_run)."""
    return [*STUDY_SETTINGS, *(SMOKE_SETTINGS if smoke else ()), *settings]


def run(args: argparse.Namespace) -> int:
    device = resolve_device(args.device)
    recipe = SMOKE_RECIPE if args.smoke else RECIPE
    cells = args.cells or list(SMOKE_GRID if args.smoke else GRID)
    variants = study_variants(cells, args.seeds)
    extra = study_settings(args.smoke, args.settings)
    for variant in variants:  # every cell is checked before the first run starts
        variant_config(recipe, variant, extra)
    runs_dir = args.runs_dir or Path("runs") / "experiments" / "regularization"
    if args.as_they_stand:
        trained = runs_as_they_stand(variants, recipe, runs_dir, extra)
        if not trained:
            raise ConfigError(f"--as-they-stand: no run of these cells under {runs_dir} has a checkpoint yet")
    else:
        trained = train_variants(variants, recipe, runs_dir, args.data_dir, extra, args.jobs)
    results = [score_run(t.run_dir, t.variant.label, int(t.variant.settings[-1].split("=")[1]), device,
                         args.data_dir, args.smoke, t.finished) for t in trained]
    for result in results:
        log(f"  {result.cell}-seed{result.seed}: val NLL best {result.best_nll:.3f} (epoch "
            f"{result.best_nll_epoch:g}), last {result.last_nll:.3f}; val BLEU {result.val_bleu:.2f}")
    summary = summarize(results)
    settings = {"recipe": recipe, "study_settings": extra, "runs_dir": str(runs_dir),
                "cells": {name: list(Cell(name).settings) for name in cells}, "seeds": list(args.seeds)}
    write_results(args.out, "regularization", args.command_line, device, settings,
                  {"device": device_label(device), "runs": [asdict(r) for r in results],
                   "cells": [asdict(c) for c in summary]},
                  table(summary, provenance_line(device, args.command_line), extra), {"curves": plot(results)},
                  readme=findings(summary))
    log(f"regularization: wrote {args.out}/results.json, table.md, README.md, curves.png")
    return 0


def score_run(run_dir: Path, cell: str, seed: int, device, data_dir: Path | None, smoke: bool,
              finished: bool = True) -> RunResult:
    """A run's curves from its metrics, and greedy BLEU of its last weights on the whole validation split (the
    first sentences only with ``smoke``)."""
    records = metrics(run_dir)
    valid = [r for r in records if r.kind == "valid"]
    if not valid:
        raise ConfigError(f"{run_dir}: the run has no validation record; train it again")
    best = min(valid, key=lambda r: r.nll)
    data = load_preset(str(run_dir / "config.yaml")).data
    corpus = load_corpus(data.dataset, data.valid_split, data.direction, data_dir=data_dir or data.data_dir)
    sources, references = corpus.source, corpus.target
    if smoke:
        sources, references = sources[:8], references[:8]
    model, tokenizer = load_final_model(run_dir, device)
    scores, _ = greedy_scores(model, tokenizer, sources, references, device, "fp32")
    return RunResult(cell, seed, valid[-1].epoch, valid[-1].step, best.nll, best.epoch,
                     valid[-1].nll, scores.bleu, [(r.epoch, r.nll, r.bleu) for r in valid],
                     finished)


@dataclass
class CellSummary:
    """A cell over its seeds: means, and the spread of validation BLEU (max − min; None with one seed)."""

    cell: str
    seeds: int
    val_bleu: float
    bleu_spread: float | None
    best_nll: float
    last_nll: float
    last_above_best: float
    best_nll_epoch: float
    epochs: float
    finished: bool = True  # every run of the cell has trained its whole schedule


def summarize(results: Sequence[RunResult]) -> list[CellSummary]:
    by_cell: dict[str, list[RunResult]] = {}
    for result in results:
        by_cell.setdefault(result.cell, []).append(result)
    mean = statistics.fmean
    return [CellSummary(cell, len(runs), mean(r.val_bleu for r in runs),
                        max(r.val_bleu for r in runs) - min(r.val_bleu for r in runs) if len(runs) > 1 else None,
                        mean(r.best_nll for r in runs),
                        mean(r.last_nll for r in runs), mean(r.last_above_best for r in runs),
                        mean(r.best_nll_epoch for r in runs), mean(r.epochs for r in runs),
                        all(r.finished for r in runs))
            for cell, runs in by_cell.items()]


def findings(cells: Sequence[CellSummary]) -> str:
    """The README: per width, the cell whose last weights score best on validation, read against the seed spread."""
    lines = ["# Regularization study: what lets each width of multi30k-cpu improve with its epochs", "",
             "Written by `vaswani experiment regularization` (command, commit and hardware in `results.json` and "
             "`table.md`). Every cell trains the preset's whole schedule by epochs, in float32, with no clock; BLEU "
             "is greedy on the whole validation split, of the last weights. Test sets are not read.", ""]
    noise = max((c.bleu_spread for c in cells if c.bleu_spread is not None), default=None)
    lines.append(f"Seed spread (largest max − min val BLEU of a cell over its seeds): **{noise:.2f} BLEU**."
                 if noise is not None else "No cell has two seeds yet: differences cannot be read against noise.")
    lines.append("")
    unfinished = [c.cell for c in cells if not c.finished]
    if unfinished:
        lines += [f"**Interim**: {', '.join(unfinished)} still training (read at their last checkpoint with "
                  "`--as-they-stand`); a cell's standing can change before its schedule ends.", ""]
    for width in WIDTHS:
        ranked = sorted((c for c in cells if Cell(c.cell).width == width), key=lambda c: -c.val_bleu)
        if not ranked:
            continue
        top = ranked[0]
        lines.append(f"- **{width}**: best {top.cell} at {top.val_bleu:.2f} val BLEU ({top.seeds} seed(s)); its last "
                     f"NLL is {100 * top.last_above_best:.1f} % above its minimum (epoch {top.best_nll_epoch:g} of "
                     f"{top.epochs:g}). "
                     + "; ".join(f"{c.cell} {c.val_bleu:.2f} (last NLL +{100 * c.last_above_best:.1f} %)"
                                 for c in ranked[1:]))
    return "\n".join(lines)


def table(cells: Sequence[CellSummary], provenance: str, extra: Sequence[str]) -> str:
    headers = ["cell", "seeds", "val BLEU (last weights)", "spread", "min val NLL", "at epoch", "last val NLL",
               "last above min", "epochs"]
    body = [[c.cell, c.seeds, fixed(c.val_bleu), fixed(c.bleu_spread), fixed(c.best_nll, 3),
             fixed(c.best_nll_epoch, 1), fixed(c.last_nll, 3), f"{100 * c.last_above_best:.1f} %",
             fixed(c.epochs, 1) + ("" if c.finished else " (in progress)")]
            for c in cells]
    return (f"# Regularization study\n\n{markdown_table(headers, body)}\n\nStudy settings: `{' '.join(extra)}`.\n\n"
            f"{provenance}\n")


def plot(results: Sequence[RunResult]):
    plt = pyplot()
    figure, (nll_axis, bleu_axis) = plt.subplots(1, 2, figsize=(12, 5))
    for result in results:
        epochs = [point[0] for point in result.curve]
        label = f"{result.cell} s{result.seed}"
        nll_axis.plot(epochs, [point[1] for point in result.curve], marker=".", label=label)
        points = [(e, b) for e, _, b in result.curve if b is not None]
        bleu_axis.plot([e for e, _ in points], [b for _, b in points], marker=".", label=label)
    nll_axis.set(xlabel="epoch", ylabel="validation NLL (whole split)", title="validation NLL per epoch")
    bleu_axis.set(xlabel="epoch", ylabel="greedy BLEU, validation subset", title="BLEU per epoch")
    for axis in (nll_axis, bleu_axis):
        axis.grid(alpha=0.3)
    bleu_axis.legend(fontsize=7, ncol=2)
    return figure


__all__ = ["GRID", "Cell", "add_arguments", "findings", "run", "study_variants"]
