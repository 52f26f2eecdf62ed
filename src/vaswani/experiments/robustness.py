"""`vaswani experiment robustness`: how models with sinusoidal, learned and rotary positions cope with
perturbed sources (shuffled, dropped, repeated tokens; with models that actually learned).

Three variants of one recipe (``multi30k-ablation`` by default; only ``model.positions`` differs) are trained
for the same number of updates from the same seed, or reused from ``--runs-dir``. Each is then scored on the
validation split under four source conditions (:mod:`vaswani.experiments.perturb`): control, shuffled middle,
dropped tokens, repeated tokens. Reported per model and condition: teacher-forced NLL and token accuracy,
accuracy per target position, and greedy-search BLEU (sacreBLEU) against the raw references.
"""

from __future__ import annotations

import argparse
import dataclasses

import numpy as np
import torch

from vaswani.arguments import ranged
from vaswani.experiments.perturb import CONDITIONS, DESCRIPTIONS, perturb_all
from vaswani.experiments.reporting import device_label, log, markdown_table, provenance_line, pyplot, write_results
from vaswani.experiments.variants import (
    POSITION_LABELS,
    VariantRun,
    add_variant_arguments,
    final_validation,
    load_final_model,
    load_splits,
    metrics,
    setup,
)
from vaswani.records import to_json
from vaswani.settings import MAX_COUNT
from vaswani.training.scoring import greedy_scores, id_batches, teacher_forced_scores

POSITION_VARIANTS = ("sinusoidal", "learned", "rope")
MIN_SENTENCES_PER_POSITION = 20  # accuracy at a target position is plotted where at least this many reach it


@dataclasses.dataclass(frozen=True)
class RobustnessSettings:
    """What the study scored: the recipe and its runs, the sentences, the perturbations (results.json "settings")."""

    recipe: str
    runs: dict[str, VariantRun]
    split: str
    sentences: int
    perturbation_seed: int
    precision: str
    conditions: dict[str, str]
    example_source: dict[str, str]
    extra_settings: list[str]


@dataclasses.dataclass
class RobustnessRow:
    """One model under one source condition: its scores, the run's own final validation, and the change from
    the control condition (filled in by :func:`_add_deltas` once every condition is scored)."""

    variant: str
    label: str
    condition: str
    loss: float
    nll: float
    accuracy: float
    tokens: int
    position_accuracy: list[float] | None
    position_count: list[int] | None
    bleu: float | None
    first_hypothesis: str | None
    training_val_nll: float
    training_val_accuracy: float
    steps: int
    delta_nll: float | None = None
    delta_accuracy: float | None = None
    delta_bleu: float | None = None


# ---- the experiment -----------------------------------------------------------------------------------------
def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_variant_arguments(parser)
    parser.add_argument("--sentences", type=ranged(int, ge=1, le=MAX_COUNT), default=None,
                        help="score only the first N validation sentences (default: all; --smoke: 32)")
    parser.add_argument("--seed", type=ranged(int, ge=0, le=MAX_COUNT), default=0,
                        help="seed of the perturbations (default %(default)s)")
    parser.add_argument("--no-bleu", action="store_true", help="skip greedy decoding (teacher-forced scores only)")


def run(args: argparse.Namespace) -> int:
    device, precision, recipe, runs, config = setup(args, POSITION_VARIANTS)
    split = config.data.valid_split
    prepared = load_splits(config, [split], args.data_dir)
    encoded, corpus = prepared.splits[split], prepared.corpora[split]
    count = len(encoded) if args.sentences is None else min(args.sentences, len(encoded))
    if args.smoke and args.sentences is None:
        count = min(32, len(encoded))
    sources = [np.asarray(encoded.source(i)) for i in range(count)]
    targets = [np.asarray(encoded.target(i)) for i in range(count)]
    references = [corpus.target[int(encoded.line_index[i])] for i in range(count)]
    perturbed = {c: perturb_all(sources, c, args.seed, prepared.tokenizer.pad_id) for c in CONDITIONS}
    examples = {c: prepared.tokenizer.decode([int(t) for t in perturbed[c][0] if t != prepared.tokenizer.pad_id])
                for c in CONDITIONS}

    rows: list[RobustnessRow] = []
    for run_ in runs:
        model, tokenizer = load_final_model(run_.run_dir, device)
        if tokenizer.to_str() != prepared.tokenizer.to_str():
            raise RuntimeError(f"{run_.run_dir}: its tokenizer differs from the recipe's prepared data")
        trained = final_validation(metrics(run_.run_dir))
        for condition in CONDITIONS:
            scores = teacher_forced_scores(model, id_batches(perturbed[condition], targets, tokenizer, device),
                                           precision, config.train.label_smoothing, per_position=True)
            bleu, hypotheses = None, []
            if not args.no_bleu:
                corpus_scores, hypotheses = greedy_scores(model, tokenizer, perturbed[condition], references, device,
                                                          precision)
                bleu = corpus_scores.bleu
            log(f"  {run_.variant.name:>10} {condition:>8}: nll {scores.nll:.3f} acc {scores.accuracy:.3f}"
                + ("" if bleu is None else f" BLEU {bleu:.2f}"))
            rows.append(RobustnessRow(variant=run_.variant.name, label=POSITION_LABELS[run_.variant.name],
                                      condition=condition, **dataclasses.asdict(scores), bleu=bleu,
                                      first_hypothesis=hypotheses[0] if hypotheses else None,
                                      training_val_nll=trained.nll, training_val_accuracy=trained.accuracy,
                                      steps=trained.step))
    _add_deltas(rows)

    settings = RobustnessSettings(
        recipe=recipe, runs={r.variant.name: VariantRun.of(r) for r in runs},
        split=split, sentences=count, perturbation_seed=args.seed, precision=precision, conditions=dict(DESCRIPTIONS),
        example_source=examples, extra_settings=list(args.settings))
    results = {"device": device_label(device), "rows": [to_json(row) for row in rows]}
    table = _table(rows, settings, device, args.command_line)
    figures = {"position_accuracy": _plot_positions(rows), "bleu": _plot_bleu(rows)}
    write_results(args.out, "robustness", args.command_line, device, to_json(settings), results, table, figures)
    log(f"robustness: wrote {args.out}/results.json, table.md, position_accuracy.png, bleu.png")
    return 0


def _add_deltas(rows: list[RobustnessRow]) -> None:
    control = {r.variant: r for r in rows if r.condition == "control"}
    for row in rows:
        base = control[row.variant]
        row.delta_nll = row.nll - base.nll
        row.delta_accuracy = row.accuracy - base.accuracy
        row.delta_bleu = None if row.bleu is None else row.bleu - base.bleu


def _table(rows: list[RobustnessRow], settings: RobustnessSettings, device: torch.device, command: str) -> str:
    first = rows[0]
    lines = [
        "# Robustness to perturbed sources, by position encoding",
        "",
        provenance_line(device, command),
        "",
        f"Models: recipe `{settings.recipe}`, identical except `model.positions`, each trained for "
        f"{first.steps} updates from the same seed (runs: "
        + ", ".join(f"`{v.run_dir}`" for v in settings.runs.values()) + ").",
        f"Scored on the first {settings.sentences} sentences of `{settings.split}`; perturbation seed "
        f"{settings.perturbation_seed}. Loss is the teacher-forced NLL per target token (nats), accuracy the "
        "teacher-forced argmax accuracy, BLEU greedy search (sacreBLEU 13a) against the raw references.",
        "",
        "Conditions: " + "; ".join(f"**{c}**: {d}" for c, d in settings.conditions.items()) + ".",
        "",
        markdown_table(
            ["positions", "condition", "NLL", "Δ NLL", "accuracy", "Δ accuracy", "BLEU", "Δ BLEU"],
            [[r.label, r.condition, r.nll, r.delta_nll, r.accuracy, r.delta_accuracy, r.bleu, r.delta_bleu]
             for r in rows]),
        "",
        "How well the models learned (control condition, the comparison's baseline): "
        + ", ".join(f"{r.label} NLL {r.nll:.2f} (perplexity {np.exp(r.nll):.1f}), accuracy "
                    f"{100 * r.accuracy:.1f} %" for r in rows if r.condition == "control")
        + ". (The report this study re-measures had models with loss > 7 and ~15 % accuracy.)",
        "",
        "The first validation source under each condition:",
        "",
        *[f"- {c}: `{s}`" for c, s in settings.example_source.items()],
    ]
    return "\n".join(lines)


def _plot_positions(rows: list[RobustnessRow]):
    plt = pyplot()
    variants = list(dict.fromkeys(r.variant for r in rows))
    figure, axes = plt.subplots(1, len(variants), figsize=(5 * len(variants), 4), sharey=True, squeeze=False)
    for ax, variant in zip(axes[0], variants):
        for row in (r for r in rows if r.variant == variant):
            counts = np.asarray(row.position_count)
            keep = np.flatnonzero(counts >= MIN_SENTENCES_PER_POSITION)
            accuracy = np.asarray(row.position_accuracy, dtype=float)[keep]
            ax.plot(keep + 1, accuracy, label=row.condition)
        ax.set(title=f"{row.label} positions", xlabel="target position", ylabel="token accuracy")
        ax.grid(alpha=0.3)
    axes[0][0].legend()
    figure.suptitle(f"Teacher-forced accuracy per target position (positions reached by ≥ "
                    f"{MIN_SENTENCES_PER_POSITION} sentences)")
    return figure


def _plot_bleu(rows: list[RobustnessRow]):
    plt = pyplot()
    variants = list(dict.fromkeys(r.label for r in rows))
    figure, ax = plt.subplots(figsize=(7, 4))
    width = 0.8 / len(CONDITIONS)
    for k, condition in enumerate(CONDITIONS):
        values = [next((r.bleu if r.bleu is not None else r.accuracy * 100)
                       for r in rows if r.label == label and r.condition == condition) for label in variants]
        ax.bar(np.arange(len(variants)) + (k - (len(CONDITIONS) - 1) / 2) * width, values, width, label=condition)
    has_bleu = all(r.bleu is not None for r in rows)
    ax.set(xticks=np.arange(len(variants)), xticklabels=variants, xlabel="position encoding",
           ylabel="BLEU (greedy)" if has_bleu else "token accuracy (%)",
           title="Validation " + ("BLEU" if has_bleu else "accuracy") + " under each perturbation")
    ax.legend()
    ax.grid(axis="y", alpha=0.3)
    return figure
