"""`vaswani experiment recipe`: what buys the most BLEU per CPU-minute for the default CPU preset.

Proxy runs of the ``multi30k-cpu`` recipe, each changing one thing (vocabulary, width, depth, dropout, learning
rate, batch, label smoothing, optimizer, norm placement), all with the same wall-clock budget and seed, plus the
recipe again from another seed: the difference between those two is the scale every other difference is read
against. Each run is scored on the *whole validation split* (greedy BLEU, chrF, length ratio) and by its
validation NLL; the test sets are never touched. Reported: a table, BLEU against minutes for every run, and a
README whose sentences compare the numbers.

A proxy of N minutes ranks settings for N minutes of training. What helps early (little regularisation, a high
learning rate) need not help at the 50-minute budget of the real run, and the README says which side of the seed
noise each change landed on, nothing more.
"""

from __future__ import annotations

import argparse
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from vaswani.arguments import parse_variant, ranged
from vaswani.data.corpora import load_corpus
from vaswani.devices import resolve_device
from vaswani.errors import ConfigError
from vaswani.experiments.reporting import device_label, fixed, log, markdown_table, pyplot, write_results
from vaswani.experiments.variants import (
    RunVariant,
    TrainedRun,
    add_runs_arguments,
    final_validation,
    load_final_model,
    metrics,
    train_variants,
    variant_config,
)
from vaswani.precision import resolve_precision
from vaswani.training.presets import load_preset
from vaswani.training.scoring import greedy_scores

RECIPE = "multi30k-cpu"
SMOKE_RECIPE = "smoke"
BASELINE, NOISE = "baseline", "baseline-seed1"
# Every proxy: the budget, no early stop, no final-model step (the final model is the real run's business), and
# the quick BLEU on the preset's validation subset at every epoch for the BLEU-vs-minutes curve.
PROXY_SETTINGS = ("train.final_model=false", "train.patience=null", "train.progress=false",
                  "train.scale_up_models=")  # every variant trains its own model, not the one the clock affords

VARIANTS: dict[str, RunVariant] = {v.name: v for v in (
    RunVariant(BASELINE, "multi30k-cpu as it is"),
    RunVariant(NOISE, "the same, seed 1 (noise reference)", ("train.seed=1",)),
    RunVariant("vocab-6000", "joint BPE vocabulary 6,000", ("data.vocab_size=6000",)),
    RunVariant("vocab-10000", "joint BPE vocabulary 10,000", ("data.vocab_size=10000",)),
    RunVariant("wider", "d_model 192, d_ff 768", ("model.d_model=192", "model.d_ff=768")),
    RunVariant("deeper", "4+4 layers", ("model.n_encoder_layers=4", "model.n_decoder_layers=4")),
    RunVariant("dropout-0.2", "dropout 0.2", ("model.dropout=0.2",)),
    RunVariant("lr-high", "peak learning rate ×1.43 (lr_factor 0.5)", ("train.lr_factor=0.5",)),
    RunVariant("batch-2000", "2,000 tokens per batch", ("train.max_tokens=2000",)),
    RunVariant("smoothing-0.2", "label smoothing 0.2", ("train.label_smoothing=0.2",)),
    RunVariant("adam-l2", "the paper's Adam + L2 instead of AdamW", ("train.optimizer=adam-l2",)),
    RunVariant("pre-ln", "pre-LN", ("model.norm=pre",)),
)}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--minutes", type=ranged(float, gt=0), default=None,
                        help="wall-clock budget of every proxy run (default 7; --smoke: a few updates instead)")
    parser.add_argument("--variants", nargs="+", default=None, metavar="NAME",
                        help=f"which of the built-in variants (default all: {' '.join(VARIANTS)})")
    parser.add_argument("--variant", action="append", default=[], metavar="NAME:SECTION.KEY=VALUE,…",
                        help="an extra variant, e.g. wide-ff:model.d_ff=1024 (repeatable)")
    add_runs_arguments(parser, "runs/experiments/recipe", "train.seed=2")


def parse_run_variant(spec: str) -> RunVariant:
    """``NAME:section.key=value,section.key=value`` → a RunVariant; a malformed spec is a ConfigError naming it."""
    name, items = parse_variant(spec, ("model", "data", "train"))
    return RunVariant(name, ", ".join(items), tuple(items))


def run(args: argparse.Namespace) -> int:
    device = resolve_device(args.device)
    precision = resolve_precision("auto", device)
    variants = _chosen_variants(args)
    recipe = SMOKE_RECIPE if args.smoke else RECIPE
    extra = proxy_settings(args.minutes or 7, args.smoke, args.settings)
    for variant in variants:  # every setting is checked before the first run starts
        variant_config(recipe, variant, extra)
    runs_dir = args.runs_dir or Path("runs") / "experiments" / "recipe"
    runs = train_variants(variants, recipe, runs_dir, args.data_dir, extra, args.jobs)


    config = load_preset(recipe)
    valid = load_corpus(config.data.dataset, config.data.valid_split, config.data.direction,
                        data_dir=args.data_dir or config.data.data_dir)
    sources, references = (valid.source[:16], valid.target[:16]) if args.smoke else (valid.source, valid.target)
    rows, curves = [], {}
    for trained in runs:
        row, curves[trained.variant.name] = _score(trained, sources, references, device, precision)
        rows.append(row)
        log(f"  {trained.variant.name:>14}: {row.updates} updates, val NLL {row.val_nll:.3f}, "
            f"val BLEU {row.val_bleu:.2f}")
    noise = _seed_noise(rows)
    baseline = next((r for r in rows if r.variant == BASELINE), None)
    for row in rows:
        row.delta_bleu = None if baseline is None else row.val_bleu - baseline.val_bleu
        row.delta_in_noise_units = None if row.delta_bleu is None or not noise else row.delta_bleu / noise
    settings = {"recipe": recipe, "proxy_settings": extra, "valid_sentences": len(sources),
                "precision": precision, "runs_dir": str(runs_dir),
                "variants": {r.variant.name: list(r.variant.settings) for r in runs}}
    results = {"device": device_label(device), "seed_noise_bleu": noise, "rows": [asdict(r) for r in rows],
               "curves": {name: [asdict(point) for point in curve] for name, curve in curves.items()}}
    write_results(args.out, "recipe", args.command_line, device, settings, results,
                  _table(rows, noise, recipe, len(sources), extra, args.command_line),
                  {"bleu_vs_minutes": _plot(curves, rows)},
                  readme=findings(rows, noise, args.minutes or 7))
    log(f"recipe: wrote {args.out}/results.json, table.md, README.md, bleu_vs_minutes.png")
    return 0


def proxy_settings(minutes: float, smoke: bool, settings: list[str]) -> list[str]:
    """The settings every proxy run adds to its variant's: the budget. Runs trained at once share the cores
    (variants.threads_per_run)."""
    extra = [*PROXY_SETTINGS, *settings]
    if smoke:
        extra += ["train.max_steps=4", "train.max_epochs=null", "train.eval_every_steps=4", "train.bleu_subset=0"]
    else:
        extra.append(f"train.max_minutes={minutes}")  # the preset's max_epochs is never reached first
    return extra


def _chosen_variants(args: argparse.Namespace) -> list[RunVariant]:
    names = args.variants or ([BASELINE, NOISE, "dropout-0.2"] if args.smoke else list(VARIANTS))
    unknown = [name for name in names if name not in VARIANTS]
    if unknown:
        raise ConfigError(f"--variants: unknown {unknown}; choose from {list(VARIANTS)} or add --variant NAME:…")
    chosen = [VARIANTS[name] for name in names] + [parse_run_variant(spec) for spec in args.variant]
    seen = [v.name for v in chosen]
    if len(set(seen)) != len(seen):
        raise ConfigError(f"--variant: a name is used twice ({seen})")
    return chosen


@dataclass
class CurvePoint:
    """One evaluation of a proxy run: when it came (minutes of training, update) and what it measured."""

    minutes: float
    step: int
    bleu: float | None  # greedy, the preset's validation subset
    nll: float


@dataclass
class ProxyResult:
    """One proxy run: what it changed, how far it got in its minutes, and what its final weights score on the
    whole validation split; the difference to the baseline is filled in once every run is scored."""

    variant: str
    label: str
    settings: list[str]
    updates: int
    epochs: float
    minutes: float
    tokens_per_s: float | None
    parameters: int
    warmup_steps: int
    val_nll: float
    val_bleu: float
    val_chrf: float
    length_ratio: float
    reused: bool
    delta_bleu: float | None = None
    delta_in_noise_units: float | None = None


def _score(trained: TrainedRun, sources: list[str], references: list[str], device, precision: str
           ) -> tuple[ProxyResult, list[CurvePoint]]:
    records = metrics(trained.run_dir)
    model, tokenizer = load_final_model(trained.run_dir, device)
    scores, _ = greedy_scores(model, tokenizer, sources, references, device, precision)
    train_records = [r for r in records if r.kind == "train"]
    steps = np.array([r.step for r in train_records]) if train_records else np.zeros(0)
    seconds = np.array([r.elapsed_s for r in train_records]) if train_records else np.zeros(0)

    def minutes_at(step: int) -> float:
        return float(np.interp(step, steps, seconds) / 60) if len(steps) else 0.0

    valid = [r for r in records if r.kind == "valid"]
    curve = [CurvePoint(minutes_at(r.step), r.step, r.bleu, r.nll) for r in valid]
    last = final_validation(records)
    speeds = [r.tokens_per_s for r in train_records if r.tokens_per_s is not None]
    row = ProxyResult(trained.variant.name, trained.variant.label, list(trained.variant.settings), last.step,
                      last.epoch, minutes_at(last.step), float(np.median(speeds)) if speeds else None,
                      model.num_parameters(), _warmup(trained.run_dir), last.nll, scores.bleu, scores.chrf,
                      scores.length_ratio, trained.reused)
    return row, curve


def _warmup(run_dir: Path) -> int:
    return load_preset(str(run_dir / "config.yaml")).train.warmup_steps


def _seed_noise(rows: list[ProxyResult]) -> float | None:
    """|BLEU(baseline) − BLEU(baseline, seed 1)|: how far two runs land when only the seed changes."""
    by_name = {row.variant: row for row in rows}
    if BASELINE in by_name and NOISE in by_name:
        return abs(by_name[BASELINE].val_bleu - by_name[NOISE].val_bleu)
    return None


def findings(rows: list[ProxyResult], noise: float | None, minutes: float) -> str:
    """The README: which changes beat the baseline by more than the seed noise, which are within it, which hurt."""
    lines = ["# Recipe study: what buys BLEU per CPU-minute", "",
             f"Written by `vaswani experiment recipe` (command, commit and hardware in `results.json` and "
             f"`table.md`). Every proxy trained for the same {minutes:g} minutes of wall time from the same seed; "
             "BLEU is greedy on the whole validation split. A proxy ranks settings for its own budget: what helps "
             "in a few minutes need not help at the real run's 50.", ""]
    baseline = next((r for r in rows if r.variant == BASELINE), None)
    if baseline is None or noise is None:
        lines.append("The baseline or its second seed is missing, so no difference can be read against noise.")
        return "\n".join(lines)
    lines.append(f"Seed noise: the baseline from seeds 0 and 1 differs by **{noise:.2f} BLEU**. A change counts "
                 "as a gain or a loss only beyond that.")
    lines.append("")
    others = sorted((r for r in rows if r.variant not in (BASELINE, NOISE)), key=lambda r: -r.delta_bleu)
    gains = [r for r in others if r.delta_bleu > noise]
    losses = [r for r in others if r.delta_bleu < -noise]
    within = [r for r in others if abs(r.delta_bleu) <= noise]

    def describe(row: ProxyResult) -> str:
        return (f"{row.label} ({row.delta_bleu:+.2f} BLEU, {row.updates} updates vs "
                f"{baseline.updates}, val NLL {row.val_nll:.3f} vs {baseline.val_nll:.3f})")

    if baseline.warmup_steps and baseline.updates < baseline.warmup_steps:
        lines.append(f"The baseline ended after {baseline.updates} updates, inside its "
                     f"{baseline.warmup_steps}-update warmup: the learning rate was still rising, so these "
                     "proxies rank how fast a setting starts, and a change that reaches a high learning rate "
                     "sooner (more, smaller batches) is favoured by the budget itself.")
        lines.append("")
    slowed = [r for r in rows if r.parameters == baseline.parameters and r.tokens_per_s
              and baseline.tokens_per_s and r.tokens_per_s < 0.9 * baseline.tokens_per_s]
    if slowed:
        lines.append("Same model size, yet under 90 % of the baseline's tokens/s: "
                     + ", ".join(f"{r.variant} ({r.tokens_per_s:,.0f} vs {baseline.tokens_per_s:,.0f})"
                                 for r in slowed)
                     + ". The machine, not the setting, slowed these runs (it is shared), so they had fewer "
                     "updates in the same minutes; read their BLEU with that in mind.")
        lines.append("")
    lines.append("- **Gains beyond the noise:** " + ("; ".join(map(describe, gains)) if gains else "none."))
    lines.append("- **Within the noise:** " + ("; ".join(map(describe, within)) if within else "none."))
    lines.append("- **Losses beyond the noise:** " + ("; ".join(map(describe, losses)) if losses else "none."))
    return "\n".join(lines)


def _table(rows: list[ProxyResult], noise: float | None, recipe: str, valid_sentences: int, extra: list[str],
           command: str) -> str:
    headers = ["variant", "what changed", "parameters", "updates", "epochs", "tokens/s", "val NLL", "val BLEU",
               "chrF", "length ratio", "Δ BLEU", "Δ / seed noise"]
    body = [[r.variant, r.label, f"{r.parameters / 1e6:.2f}M", r.updates, fixed(r.epochs), r.tokens_per_s,
             fixed(r.val_nll, 3), fixed(r.val_bleu), fixed(r.val_chrf), fixed(r.length_ratio, 3),
             fixed(r.delta_bleu), fixed(r.delta_in_noise_units, 1)] for r in rows]
    noise_text = f"{noise:.2f}" if noise is not None else "not measured"
    return (f"# Recipe study ({recipe}, {valid_sentences} validation sentences)\n\n"
            f"{markdown_table(headers, body)}\n\nSeed noise (|baseline − baseline-seed1| val BLEU): {noise_text}. "
            f"Proxy settings: `{' '.join(extra)}`.\n\nCommand: `{command}`\n")


def _plot(curves: dict[str, list[CurvePoint]], rows: list[ProxyResult]):
    plt = pyplot()
    figure, axis = plt.subplots(figsize=(8, 5))
    for row in rows:
        points = [p for p in curves[row.variant] if p.bleu is not None]
        if points:
            style = "-" if row.variant not in (BASELINE, NOISE) else "--"
            axis.plot([p.minutes for p in points], [p.bleu for p in points], style, marker=".",
                      label=row.variant, linewidth=2.2 if row.variant == BASELINE else 1.2)
    axis.set_xlabel("minutes of training (wall time)")
    axis.set_ylabel("greedy BLEU, validation subset")
    axis.set_title("BLEU against minutes, one change per run")
    if axis.lines:  # a run too short to evaluate BLEU (--smoke) draws no curve, and needs no legend
        axis.legend(fontsize=7, ncol=2)
    axis.grid(alpha=0.3)
    return figure


__all__ = ["CurvePoint", "ProxyResult", "VARIANTS", "add_arguments", "findings", "parse_run_variant", "proxy_settings",
           "run"]
