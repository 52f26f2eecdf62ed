"""`vaswani experiment ablation`: seed 002's design claims, measured with one budget and one seed.

Variants of one recipe (``multi30k-ablation``: the paper's post-LN, warmup, ReLU, sinusoidal layout) change one
thing each: pre-LN, no warmup (post-LN and pre-LN), GELU, RoPE, learned positions. All train for the same
number of updates from the same seed (reusing finished runs in ``--runs-dir``). Reported: learning curves on one
plot; final validation loss, test BLEU (greedy) and time per update; and length generalisation: BLEU of the
position variants on test sentences concatenated into inputs longer than any training sentence.
"""

from __future__ import annotations

import argparse
import json
import math
from typing import Any, Sequence

import numpy as np
import torch

from vaswani.experiments.common import device_label, log, markdown_table, provenance_line, pyplot, write_results
from vaswani.experiments.variants import (
    TrainedRun, add_variant_arguments, final_validation, greedy_translator, load_final_model, load_splits, metrics,
    setup, training_speed,
)

ABLATION_VARIANTS = ("sinusoidal", "pre-ln", "post-ln-no-warmup", "pre-ln-no-warmup", "gelu", "rope", "learned",
                     "sinusoidal-seed1")
LENGTH_VARIANTS = ("sinusoidal", "rope", "learned")
DEFAULT_GROUP_SIZES = (1, 2, 4, 6)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_variant_arguments(parser)
    parser.add_argument("--group-sizes", type=int, nargs="+", default=None,
                        help="length test: consecutive test sentences joined into one input "
                        f"(default {' '.join(map(str, DEFAULT_GROUP_SIZES))}; --smoke: 1 2)")
    parser.add_argument("--sentences", type=int, default=None,
                        help="test sentences translated (default: all; --smoke: 16)")


def run(args: argparse.Namespace) -> int:
    device, precision, recipe, runs, config = setup(args, ABLATION_VARIANTS)
    test_split = config["data"]["test_split"]
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
        row["test_bleu"] = _bleu(model, tokenizer, sources, references, device, precision)
        log(f"  {run_.variant.name:>18}: val NLL {row['val_nll']:.3f}, test BLEU {row['test_bleu']:.2f}")
        rows.append(row)
        if run_.variant.name in LENGTH_VARIANTS:
            length_rows += _length_test(run_, model, tokenizer, sources, references, group_sizes,
                                        longest_training_source, device, precision)

    settings = {"recipe": recipe, "test_split": test_split, "test_sentences": len(sources),
                "group_sizes": group_sizes, "longest_training_source_tokens": longest_training_source,
                "precision": precision, "extra_settings": list(args.extra_settings),
                "runs": {r.variant.name: {"run_dir": str(r.run_dir), "reused": r.reused,
                                          "settings": list(r.variant.settings)} for r in runs}}
    results = {"device": device_label(device), "rows": rows, "length_generalisation": length_rows,
               "findings": findings(rows), "curves": {name: _curve(records) for name, records in curves.items()}}
    table = _table(rows, length_rows, settings, results["findings"], device, args.command_line)
    figures = {"learning_curves": _plot_curves(curves, runs)}
    if length_rows:
        figures["length_generalisation"] = _plot_lengths(length_rows, longest_training_source)
    write_results(args.out, "ablation", args.command_line, device, settings, results, table, figures)
    log(f"ablation: wrote {args.out}/results.json, table.md, learning_curves.png")
    return 0


def _summary_row(run_: TrainedRun, records: list[dict[str, Any]]) -> dict[str, Any]:
    valid = final_validation(records)
    train = [r for r in records if r["kind"] == "train"]
    summary = json.loads((run_.run_dir / "summary.json").read_text())
    return {"variant": run_.variant.name, "label": run_.variant.label, "settings": list(run_.variant.settings),
            "steps": valid["step"], "val_loss": valid["loss"], "val_nll": valid["nll"],
            "val_accuracy": valid["accuracy"], "final_train_loss": train[-1]["loss"] if train else None,
            "skipped_updates": summary.get("skipped_updates", 0), "stop_reason": summary["stop_reason"],
            **training_speed(records)}


def _curve(records: list[dict[str, Any]]) -> dict[str, list]:
    """The learning curve as (update, NLL) pairs, so the plot can be redrawn from results.json alone."""
    return {kind: [[r["step"], r["nll"]] for r in records if r["kind"] == kind] for kind in ("train", "valid")}


def _bleu(model: Any, tokenizer: Any, sources: Sequence[str], references: Sequence[str], device: torch.device,
          precision: str) -> float:
    from vaswani.evaluation.metrics import corpus_scores

    translator = greedy_translator(model, tokenizer, device, precision)
    return corpus_scores(translator.translate(sources), references).bleu


def join_groups(lines: Sequence[str], size: int) -> list[str]:
    """Consecutive lines joined by a space, ``size`` at a time (a shorter last group is dropped, so every input
    of the group size really is that many sentences)."""
    return [" ".join(lines[i : i + size]) for i in range(0, len(lines) - size + 1, size)]


def _length_test(run_: TrainedRun, model: Any, tokenizer: Any, sources: Sequence[str], references: Sequence[str],
                 group_sizes: Sequence[int], longest_training_source: int, device: torch.device,
                 precision: str) -> list[dict[str, Any]]:
    rows = []
    for size in group_sizes:
        grouped_sources, grouped_references = join_groups(sources, size), join_groups(references, size)
        if not grouped_sources:
            continue
        lengths = np.array([len(ids) + 1 for ids in tokenizer.encode_batch(grouped_sources)])
        bleu = _bleu(model, tokenizer, grouped_sources, grouped_references, device, precision)
        rows.append({"variant": run_.variant.name, "label": run_.variant.label, "group_size": size,
                     "inputs": len(grouped_sources), "mean_source_tokens": float(lengths.mean()),
                     "max_source_tokens": int(lengths.max()),
                     "share_longer_than_training": float((lengths > longest_training_source).mean()), "bleu": bleu})
        log(f"  {run_.variant.name:>18} × {size} sentences: mean {lengths.mean():.0f} tokens, BLEU {bleu:.2f}")
    return rows


# ---- reading the numbers ------------------------------------------------------------------------------------
def findings(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each seed-002 claim as a comparison of two rows: the difference in validation NLL (lower is better)
    and test BLEU, computed here so the table's sentences cannot drift from the numbers."""
    by_name = {r["variant"]: r for r in rows}
    claims = [
        ("nothing changes but the seed (the noise scale)", "sinusoidal-seed1", "sinusoidal"),
        ("pre-LN trains better than post-LN at the same budget", "pre-ln", "sinusoidal"),
        ("post-LN needs warmup", "sinusoidal", "post-ln-no-warmup"),
        ("pre-LN does not need warmup", "pre-ln-no-warmup", "pre-ln"),
        ("GELU is better than ReLU", "gelu", "sinusoidal"),
        ("RoPE is better than sinusoidal positions", "rope", "sinusoidal"),
        ("learned positions are as good as sinusoidal (the paper's finding)", "learned", "sinusoidal"),
    ]
    out = []
    for claim, better, worse in claims:
        if better not in by_name or worse not in by_name:
            continue
        a, b = by_name[better], by_name[worse]
        out.append({"claim": claim, "variant": better, "against": worse,
                    "delta_val_nll": _difference(a["val_nll"], b["val_nll"]),
                    "delta_test_bleu": _difference(a["test_bleu"], b["test_bleu"])})
    return out


def _difference(a: float | None, b: float | None) -> float | None:
    if a is None or b is None or not (math.isfinite(a) and math.isfinite(b)):
        return None
    return a - b


def _table(rows: list[dict[str, Any]], length_rows: list[dict[str, Any]], settings: dict[str, Any],
           found: list[dict[str, Any]], device: torch.device, command: str) -> str:
    steps = rows[0]["steps"]
    lines = [
        "# Ablation: norm placement, warmup, activation, positions",
        "",
        provenance_line(device, command),
        "",
        f"Every variant is recipe `{settings['recipe']}` with the listed change, trained for {steps} updates from "
        "the same seed; the runs trained two at a time with one thread each, so time per update is comparable "
        "between rows but not an idle machine's speed. Validation NLL is per target token (nats) at the last "
        f"update; BLEU is greedy search on {settings['test_sentences']} sentences of "
        f"`{settings['test_split']}` (sacreBLEU 13a).",
        "",
        markdown_table(
            ["variant", "change", "val NLL", "val accuracy", "test BLEU", "s / update", "tokens / s", "skipped"],
            [[r["label"], ", ".join(r["settings"]) or "–", r["val_nll"], r["val_accuracy"], r["test_bleu"],
              r["seconds_per_step"], r["tokens_per_s"], r["skipped_updates"]] for r in rows]),
        "",
        "## The claims",
        "",
        markdown_table(["claim", "comparison", "Δ val NLL (negative supports)", "Δ test BLEU (positive supports)"],
                       [[f["claim"], f"{f['variant']} − {f['against']}", f["delta_val_nll"], f["delta_test_bleu"]]
                        for f in found]),
    ]
    if length_rows:
        sizes = sorted({r["group_size"] for r in length_rows})
        labels = list(dict.fromkeys(r["label"] for r in length_rows))
        cell = {(r["label"], r["group_size"]): r for r in length_rows}
        first = labels[0]
        lines += [
            "",
            "## Length generalisation",
            "",
            f"Inputs are k consecutive test sentences joined by a space (references joined the same way). The "
            f"longest training source has {settings['longest_training_source_tokens']} tokens (with </s>).",
            "",
            markdown_table(
                ["k", "inputs", "mean source tokens", "longer than any training source", *labels],
                [[k, cell[(first, k)]["inputs"], cell[(first, k)]["mean_source_tokens"],
                  f"{100 * cell[(first, k)]['share_longer_than_training']:.0f} %",
                  *[cell[(label, k)]["bleu"] if (label, k) in cell else None for label in labels]] for k in sizes]),
        ]
    return "\n".join(lines)


def _plot_curves(curves: dict[str, list[dict[str, Any]]], runs: list[TrainedRun]):
    plt = pyplot()
    figure, (train_ax, valid_ax) = plt.subplots(1, 2, figsize=(13, 4.5))
    for run_ in runs:
        records = curves[run_.variant.name]
        train = [r for r in records if r["kind"] == "train"]
        valid = [r for r in records if r["kind"] == "valid"]
        line, = train_ax.plot([r["step"] for r in train], [r["nll"] for r in train], label=run_.variant.label)
        valid_ax.plot([r["step"] for r in valid], [r["nll"] for r in valid], "o-", color=line.get_color(),
                      label=run_.variant.label)
    train_ax.set(xlabel="update", ylabel="training NLL (batch average)", title="Training")
    valid_ax.set(xlabel="update", ylabel="validation NLL", title="Validation")
    for ax in (train_ax, valid_ax):
        ax.grid(alpha=0.3)
    valid_ax.legend(fontsize=8)
    return figure


def _plot_lengths(length_rows: list[dict[str, Any]], longest_training_source: int):
    plt = pyplot()
    figure, ax = plt.subplots(figsize=(7, 4.5))
    for label in dict.fromkeys(r["label"] for r in length_rows):
        points = [r for r in length_rows if r["label"] == label]
        ax.plot([r["mean_source_tokens"] for r in points], [r["bleu"] for r in points], "o-", label=label)
    ax.axvline(longest_training_source, color="grey", linestyle="--", label="longest training source")
    ax.set(xlabel="mean source length (tokens)", ylabel="BLEU (greedy)",
           title="Length generalisation: concatenated test sentences")
    ax.grid(alpha=0.3)
    ax.legend()
    return figure
