"""`vaswani experiment ablation`: the design claims — post-LN needs warmup, pre-LN does not; pre-LN, GELU and
RoPE are better — measured with one budget and one seed.

Variants of one recipe (``multi30k-ablation``: the paper's post-LN, warmup, ReLU, sinusoidal layout) change one
thing each: pre-LN, no warmup (post-LN and pre-LN), GELU, RoPE, learned positions. All train for the same
number of updates from the same seed (reusing finished runs in ``--runs-dir``). Reported: learning curves on one
plot; final validation loss, test BLEU (greedy) and time per update; and length generalisation: BLEU of the
position variants on test sentences concatenated into inputs longer than any training sentence.
"""

from __future__ import annotations

import argparse
import math
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np
import torch

from vaswani.arguments import ranged
from vaswani.experiments.reporting import device_label, log, markdown_table, provenance_line, pyplot, write_results
from vaswani.experiments.variants import (
    POSITION_LABELS,
    TrainedRun,
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
from vaswani.training.metrics import MetricsRecord, training_speed
from vaswani.training.scoring import greedy_scores, id_batches, teacher_forced_scores
from vaswani.training.summary import RunSummary

ABLATION_VARIANTS = ("sinusoidal", "pre-ln", "post-ln-no-warmup", "pre-ln-no-warmup", "gelu", "rope", "learned",
                     "sinusoidal-seed1")
LENGTH_VARIANTS = ("sinusoidal", "rope", "learned")
DEFAULT_GROUP_SIZES = (1, 2, 4, 6)


# ---- the records: results.json's "settings" and "results" --------------------------------------------------
@dataclass
class AblationSettings:
    recipe: str
    test_split: str
    test_sentences: int
    group_sizes: list[int]
    longest_training_source_tokens: int
    precision: str
    extra_settings: list[str]
    runs: dict[str, VariantRun]


@dataclass
class AblationRow:
    """One variant's run: its last validation, its training speed, the greedy test BLEU of its final model.
    A number that is not finite (a diverged run) is null in the file."""

    variant: str
    label: str
    settings: list[str]
    steps: int
    val_loss: float | None
    val_nll: float | None
    val_accuracy: float | None
    final_train_loss: float | None
    skipped_updates: int
    stop_reason: str
    seconds_per_step: float | None
    tokens_per_s: float | None
    test_bleu: float | None = None


@dataclass
class LengthRow:
    """One position variant on inputs of ``group_size`` test sentences joined."""

    variant: str
    label: str
    group_size: int
    inputs: int
    mean_source_tokens: float
    max_source_tokens: int
    share_longer_than_training: float
    bleu: float | None
    length_ratio: float | None
    teacher_forced_nll: float | None
    teacher_forced_accuracy: float | None


@dataclass
class Finding:
    """One claim as the difference of two rows, read against the seed-to-seed difference."""

    claim: str
    variant: str
    against: str
    delta_val_nll: float | None
    delta_test_bleu: float | None
    noise_multiple: float | None
    verdict: str


@dataclass
class AblationResults:
    device: str
    rows: list[AblationRow]
    length_generalisation: list[LengthRow]
    findings: list[Finding]
    curves: dict[str, dict[str, list[list[float]]]]  # variant → train/valid → [update, NLL] pairs


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_variant_arguments(parser)
    parser.add_argument("--group-sizes", type=ranged(int, ge=1, le=MAX_COUNT), nargs="+", default=None,
                        help="length test: consecutive test sentences joined into one input "
                        f"(default {' '.join(map(str, DEFAULT_GROUP_SIZES))}; --smoke: 1 2)")
    parser.add_argument("--sentences", type=ranged(int, ge=1, le=MAX_COUNT), default=None,
                        help="test sentences translated (default: all; --smoke: 16)")


def run(args: argparse.Namespace) -> int:
    device, precision, recipe, runs, config = setup(args, ABLATION_VARIANTS)
    test_split = config.data.test_split
    prepared = load_splits(config, ["train", test_split], args.data_dir)
    corpus = prepared.corpora[test_split]
    limit = args.sentences if args.sentences is not None else (16 if args.smoke else len(corpus.source))
    sources, references = corpus.source[:limit], corpus.target[:limit]
    longest_training_source = int(prepared.splits["train"].src_lengths.max()) + 1  # + </s>
    group_sizes = args.group_sizes or ([1, 2] if args.smoke else list(DEFAULT_GROUP_SIZES))

    rows, curves, length_rows = [], {}, []
    for run_ in runs:
        records = metrics(run_.run_dir)
        curves[run_.variant.name] = records
        row = _summary_row(run_, records)
        model, tokenizer = load_final_model(run_.run_dir, device)
        row.test_bleu = greedy_scores(model, tokenizer, sources, references, device, precision)[0].bleu
        log(f"  {run_.variant.name:>18}: val NLL {row.val_nll:.3f}, test BLEU {row.test_bleu:.2f}")
        rows.append(row)
        if run_.variant.name in LENGTH_VARIANTS:
            length_rows += _length_test(run_, model, tokenizer, sources, references, group_sizes,
                                        longest_training_source, device, precision)

    settings = AblationSettings(
        recipe, test_split, len(sources), group_sizes, longest_training_source, precision,
        list(args.settings),
        runs={r.variant.name: VariantRun.of(r) for r in runs})
    results = AblationResults(device_label(device), rows, length_rows, findings(rows),
                              curves={name: _curve(records) for name, records in curves.items()})
    table = _table(rows, length_rows, settings, results.findings, device, args.command_line)
    figures = {"learning_curves": _plot_curves(curves, runs)}
    if length_rows:
        figures["length_generalisation"] = _plot_lengths(length_rows, longest_training_source)
    write_results(args.out, "ablation", args.command_line, device, to_json(settings), to_json(results), table,
                  figures)
    log(f"ablation: wrote {args.out}/results.json, table.md, learning_curves.png")
    return 0


def _summary_row(run_: TrainedRun, records: list[MetricsRecord]) -> AblationRow:
    valid = final_validation(records)
    train = [r for r in records if r.kind == "train"]
    summary = RunSummary.read(run_.run_dir)
    speed = training_speed(records)
    return AblationRow(run_.variant.name, run_.variant.label, list(run_.variant.settings),
                       steps=valid.step, val_loss=valid.loss, val_nll=valid.nll,
                       val_accuracy=valid.accuracy,
                       final_train_loss=train[-1].loss if train else None,
                       skipped_updates=summary.skipped_updates, stop_reason=summary.stop_reason.value,
                       seconds_per_step=speed.seconds_per_step, tokens_per_s=speed.tokens_per_s)


def _curve(records: list[MetricsRecord]) -> dict[str, list[list[float]]]:
    """The learning curve as (update, NLL) pairs, so the plot can be redrawn from results.json alone."""
    return {kind: [[r.step, r.nll] for r in records if r.kind == kind] for kind in ("train", "valid")}


def join_groups(lines: Sequence[str], size: int) -> list[str]:
    """Consecutive lines joined by a space, ``size`` at a time (a shorter last group is dropped, so every input
    of the group size really is that many sentences)."""
    return [" ".join(lines[i : i + size]) for i in range(0, len(lines) - size + 1, size)]


def _length_test(run_: TrainedRun, model: Any, tokenizer: Any, sources: Sequence[str], references: Sequence[str],
                 group_sizes: Sequence[int], longest_training_source: int, device: torch.device,
                 precision: str) -> list[LengthRow]:
    """BLEU on concatenated inputs mixes two things: positions the model never saw, and a model trained on
    single sentences stopping after the first one (visible as a falling length ratio). The teacher-forced NLL
    of the concatenated reference has no stopping decision, so it isolates how well positions extrapolate."""
    rows = []
    for size in group_sizes:
        grouped_sources, grouped_references = join_groups(sources, size), join_groups(references, size)
        if not grouped_sources:
            continue
        source_ids = [np.asarray(ids) for ids in tokenizer.encode_batch(grouped_sources)]
        target_ids = [np.asarray(ids) for ids in tokenizer.encode_batch(grouped_references)]
        lengths = np.array([len(ids) + 1 for ids in source_ids])
        scores, _ = greedy_scores(model, tokenizer, grouped_sources, grouped_references, device, precision)
        forced = teacher_forced_scores(model, id_batches(source_ids, target_ids, tokenizer, device), precision,
                                       label_smoothing=0.1)
        rows.append(LengthRow(run_.variant.name, POSITION_LABELS[run_.variant.name], size,
                              len(grouped_sources), mean_source_tokens=float(lengths.mean()),
                              max_source_tokens=int(lengths.max()),
                              share_longer_than_training=float((lengths > longest_training_source).mean()),
                              bleu=scores.bleu, length_ratio=scores.length_ratio,
                              teacher_forced_nll=forced.nll, teacher_forced_accuracy=forced.accuracy))
        log(f"  {run_.variant.name:>18} × {size} sentences: mean {lengths.mean():.0f} tokens, BLEU {scores.bleu:.2f} "
            f"(length ratio {scores.length_ratio:.2f}), teacher-forced NLL {forced.nll:.3f}")
    return rows


# ---- reading the numbers ------------------------------------------------------------------------------------
NOISE = ("sinusoidal-seed1", "sinusoidal")  # the same config from two seeds
NOISE_MULTIPLE = 2.0  # a difference counts as an effect only beyond twice the seed-to-seed difference


def findings(rows: list[AblationRow]) -> list[Finding]:
    """Each claim the ablation tests as a comparison of two rows, computed here so the table cannot drift from the
    numbers. The verdict reads the validation-NLL difference against the seed-to-seed difference of the paper
    layout: one pair of seeds is a rough noise scale, so anything within twice it is called "within noise"."""
    by_name = {r.variant: r for r in rows}
    # (claim, variant, against, expected sign of variant − against in val NLL: -1 better, 0 no difference)
    claims = [
        ("pre-LN trains better than post-LN at the same budget", "pre-ln", "sinusoidal", -1),
        ("post-LN needs warmup", "sinusoidal", "post-ln-no-warmup", -1),
        ("pre-LN does not need warmup", "pre-ln-no-warmup", "pre-ln", 0),
        ("GELU is better than ReLU", "gelu", "sinusoidal", -1),
        ("RoPE is better than sinusoidal positions", "rope", "sinusoidal", -1),
        ("learned positions are as good as sinusoidal (the paper's finding)", "learned", "sinusoidal", 0),
    ]
    noise = None
    if all(name in by_name for name in NOISE):
        noise = abs(_difference(by_name[NOISE[0]].val_nll, by_name[NOISE[1]].val_nll) or 0.0) or None
    out = []
    for claim, variant, against, expected in claims:
        if variant not in by_name or against not in by_name:
            continue
        a, b = by_name[variant], by_name[against]
        delta = _difference(a.val_nll, b.val_nll)
        out.append(Finding(claim, variant, against, delta, _difference(a.test_bleu, b.test_bleu),
                           noise_multiple=None if delta is None or noise is None else abs(delta) / noise,
                           verdict=_verdict(delta, noise, expected)))
    return out


def _verdict(delta: float | None, noise: float | None, expected: int) -> str:
    if delta is None:
        return "diverged"
    if noise is None:
        return "no noise reference"
    if abs(delta) <= NOISE_MULTIPLE * noise:
        return "agrees (within noise)" if expected == 0 else "within noise: not shown"
    if expected == 0:
        return "agrees (better, beyond noise)" if delta < 0 else "disagrees (worse, beyond noise)"
    return "agrees (beyond noise)" if (delta < 0) == (expected < 0) else "disagrees (beyond noise)"


def _difference(a: float | None, b: float | None) -> float | None:
    if a is None or b is None or not (math.isfinite(a) and math.isfinite(b)):
        return None
    return a - b


def _table(rows: list[AblationRow], length_rows: list[LengthRow], settings: AblationSettings,
           found: list[Finding], device: torch.device, command: str) -> str:
    steps = rows[0].steps
    lines = [
        "# Ablation: norm placement, warmup, activation, positions",
        "",
        provenance_line(device, command),
        "",
        f"Every variant is recipe `{settings.recipe}` with the listed change, trained for {steps} updates "
        "from the same seed; the runs trained two at a time with one thread each, so time per update is "
        "comparable between rows but not an idle machine's speed. Validation NLL is per target token (nats) "
        f"at the last update; BLEU is greedy search on {settings.test_sentences} sentences of "
        f"`{settings.test_split}` (sacreBLEU 13a).",
        "",
        markdown_table(
            ["variant", "change", "val NLL", "val accuracy", "test BLEU", "s / update", "tokens / s", "skipped"],
            [[r.label, ", ".join(r.settings) or "–", r.val_nll, r.val_accuracy, r.test_bleu,
              r.seconds_per_step, r.tokens_per_s, r.skipped_updates] for r in rows]),
        "",
        "## The claims",
        "",
        f"Differences are row − reference. The noise scale is the difference between the paper layout trained "
        f"from seeds 0 and 1; a difference counts as an effect beyond {NOISE_MULTIPLE:g}× that (one pair of seeds "
        "is a rough scale: more seeds per variant would sharpen every verdict).",
        "",
        markdown_table(["claim", "comparison", "Δ val NLL", "Δ test BLEU", "Δ NLL ÷ seed noise (abs.)", "verdict"],
                       [[f.claim, f"{f.variant} − {f.against}", f.delta_val_nll, f.delta_test_bleu,
                         f.noise_multiple, f.verdict] for f in found]),
    ]
    if length_rows:
        sizes = sorted({r.group_size for r in length_rows})
        labels = list(dict.fromkeys(r.label for r in length_rows))
        cell = {(r.label, r.group_size): r for r in length_rows}
        first = labels[0]
        lines += [
            "",
            "## Length generalisation",
            "",
            f"Inputs are k consecutive test sentences joined by a space (references joined the same way). The "
            f"longest training source has {settings.longest_training_source_tokens} tokens (with </s>). "
            "Greedy BLEU also pays for a model trained on single sentences stopping after the first one (the "
            "hypothesis/reference length ratio shows it); the teacher-forced NLL of the joined reference has no "
            "stopping decision and isolates how positions extrapolate.",
            "",
            markdown_table(
                ["k", "inputs", "mean source tokens", "longer than any training source",
                 *[f"{label} NLL" for label in labels], *[f"{label} BLEU (length ratio)" for label in labels]],
                [[k, cell[(first, k)].inputs, cell[(first, k)].mean_source_tokens,
                  f"{100 * cell[(first, k)].share_longer_than_training:.0f} %",
                  *[cell[(label, k)].teacher_forced_nll if (label, k) in cell else None for label in labels],
                  *[f"{cell[(label, k)].bleu:.2f} ({cell[(label, k)].length_ratio:.2f})"
                    if (label, k) in cell else None for label in labels]] for k in sizes]),
        ]
    return "\n".join(lines)


def _plot_curves(curves: dict[str, list[MetricsRecord]], runs: list[TrainedRun]):
    plt = pyplot()
    figure, (train_ax, valid_ax) = plt.subplots(1, 2, figsize=(13, 4.5))
    for run_ in runs:
        records = curves[run_.variant.name]
        train = [r for r in records if r.kind == "train"]
        valid = [r for r in records if r.kind == "valid"]
        line, = train_ax.plot([r.step for r in train], [r.nll for r in train], label=run_.variant.label)
        valid_ax.plot([r.step for r in valid], [r.nll for r in valid], "o-", color=line.get_color(),
                      label=run_.variant.label)
    train_ax.set(xlabel="update", ylabel="training NLL (batch average)", title="Training")
    valid_ax.set(xlabel="update", ylabel="validation NLL", title="Validation")
    for ax in (train_ax, valid_ax):
        ax.grid(alpha=0.3)
    valid_ax.legend(fontsize=8)
    return figure


def _plot_lengths(length_rows: list[LengthRow], longest_training_source: int):
    plt = pyplot()
    figure, (nll_ax, bleu_ax) = plt.subplots(1, 2, figsize=(12, 4.5))
    for label in dict.fromkeys(r.label for r in length_rows):
        points = [r for r in length_rows if r.label == label]
        x = [r.mean_source_tokens for r in points]
        nll_ax.plot(x, [r.teacher_forced_nll for r in points], "o-", label=label)
        bleu_ax.plot(x, [r.bleu for r in points], "o-", label=label)
    for ax in (nll_ax, bleu_ax):
        ax.axvline(longest_training_source, color="grey", linestyle="--", label="longest training source")
        ax.set(xlabel="mean source length (tokens)")
        ax.grid(alpha=0.3)
    nll_ax.set(ylabel="teacher-forced NLL of the joined reference", title="Positions beyond training lengths")
    bleu_ax.set(ylabel="BLEU (greedy)", title="Greedy translation of joined sentences")
    nll_ax.legend()
    figure.suptitle("Length generalisation: k test sentences joined into one input")
    return figure
