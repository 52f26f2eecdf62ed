"""The published classifier result: the Transformer and the TF-IDF baseline, several seeds, one held-out split.

    vaswani classify experiment --csv ../shared/data/disaster_tweets/train.csv --seeds 0 1 2 --out results/classifier

The held-out split is fixed (``split_seed``) and shared by every seed and both models, so the spread across seeds
is the Transformer's own training randomness (initialisation, dropout, batch order), and the two models are
compared on exactly the same texts. The baseline is deterministic: its spread is 0 by construction.
Writes ``results.json`` (per seed, mean ± std, command, commit, hardware), ``table.md``, ``confusion.png`` (first
seed) and ``learning_curve.png`` (every seed); the trained models go to ``runs_dir``, not into results.
"""

from __future__ import annotations

import dataclasses
import json
import statistics
import time
from pathlib import Path
from typing import Any, Callable, Sequence

from vaswani.classification.baseline import BaselineSettings, baseline_metrics
from vaswani.classification.metrics import Metrics
from vaswani.provenance import command_line, git_state, hardware
from vaswani.classification.report import (
    confusion_markdown, plot_confusions, plot_learning_curves,
)
from vaswani.classification.data import load_dataset
from vaswani.classification.settings import TrainSettings
from vaswani.classification.train import train_classifier
from vaswani.classification.checkpoint import CLASSIFIER_KIND
from vaswani.io import (
    MANIFEST_FILE,
    NUMBER,
    atomic_write_bytes,
    directory_written_whole,
    file_sha256,
    files_written_together,
)

EXPERIMENT_KIND = "classifier experiment"
EXPERIMENT_WRITER = "classify experiment"
RESULT_FILES = ("results.json", "table.md", "confusion.png", "learning_curve.png", MANIFEST_FILE)
_MEAN_STD = {"mean": NUMBER, "std": NUMBER}
_SEED = {"seed": int, "transformer": {"confusion": [[int]]}, "baseline": {"confusion": [[int]]}}
# The results.json this module writes, as far as `classify summary` reads it (see vaswani.io.json_shape_problem).
RESULTS_SHAPE = {
    "command": str, "seconds": NUMBER,
    "data": {"csv": str, "sha256": str, "rows_used": int, "labels": [str], "split_seed": int, "val_fraction": NUMBER,
             "val_rows": int},
    "settings": {"tokenizer": str, "lowercase": bool, "extra_text_columns": (list,), "max_len": int, "pooling": str,
                 "lr": NUMBER, "warmup": int, "weight_decay": NUMBER, "batch_size": int, "clip": NUMBER,
                 "epochs": int, "patience": int, "precision": str},
    "model": {"parameters": int, "config": {"vocab_size": int, "d_model": int, "n_heads": int,
                                            "n_encoder_layers": int, "d_ff": int, "norm": str, "positions": str,
                                            "dropout": NUMBER}},
    "baseline_settings": {"ngram_max": int, "sublinear_tf": bool, "C": NUMBER},
    "seeds": [_SEED],
    "summary": {"transformer": {"macro_f1": _MEAN_STD, "accuracy": _MEAN_STD, "last_epoch_macro_f1": _MEAN_STD},
                "baseline": {"macro_f1": _MEAN_STD, "accuracy": _MEAN_STD}},
}


def mean_std(values: Sequence[float]) -> dict[str, float]:
    """Mean and sample standard deviation (n - 1; 0 for a single value)."""
    return {
        "mean": statistics.fmean(values),
        "std": statistics.stdev(values) if len(values) > 1 else 0.0,
        "min": min(values),
        "max": max(values),
    }


def run_experiment(
    csv_path: str | Path,
    seeds: Sequence[int],
    out_dir: str | Path,
    settings: TrainSettings,
    runs_dir: str | Path,
    split_seed: int = 0,
    progress: bool = True,
    log: Callable[[str], None] = print,
) -> dict[str, Any]:
    csv_path, out_dir, runs_dir = Path(csv_path), Path(out_dir), Path(runs_dir)
    started = time.perf_counter()
    settings = dataclasses.replace(settings, split_seed=split_seed)
    data = load_dataset(csv_path, settings)  # the split does not depend on the training seed
    train_texts, _ = data.split("train")
    val_texts, _ = data.split("val")
    # The baseline sees the same (lowercased) texts; it is deterministic, so it is fitted once, before any
    # Transformer trains, and every seed gets the same numbers.
    baseline = baseline_metrics(data, settings, csv_path)

    per_seed, histories, first_confusions = [], {}, None
    for seed in seeds:
        log(f"--- seed {seed} ---")
        seed_dir = runs_dir / f"seed_{seed}"
        with directory_written_whole(seed_dir, kind=CLASSIFIER_KIND, writer=EXPERIMENT_WRITER) as staging:
            run = train_classifier(data, dataclasses.replace(settings, seed=seed), staging, progress=progress,
                                   log=log)
        log(f"seed {seed}: Transformer macro-F1 {run.val_metrics.macro_f1:.4f} (epoch {run.best_epoch}), "
            f"baseline {baseline.macro_f1:.4f}")
        histories[f"seed {seed}"] = run.history
        if first_confusions is None:
            first_confusions = (seed, run.val_metrics, baseline)
        per_seed.append({
            "seed": seed,
            "transformer": {
                **run.val_metrics.to_dict(),
                "best_epoch": run.best_epoch,
                "epochs_run": len(run.history),
                # Early stopping picks the epoch on this same split, a small optimistic bias; the last epoch's
                # score is free of it, so both are kept.
                "last_epoch_macro_f1": run.history[-1].val_macro_f1,
                "last_epoch_accuracy": run.history[-1].val_accuracy,
                "history": [dataclasses.asdict(e) for e in run.history],
                "seconds": run.seconds,
            },
            "baseline": baseline.to_dict(),
        })

    summary = {
        model: {metric: mean_std([s[model][metric] for s in per_seed]) for metric in ("accuracy", "macro_f1")}
        for model in ("transformer", "baseline")
    }
    summary["transformer"]["last_epoch_macro_f1"] = mean_std([s["transformer"]["last_epoch_macro_f1"]
                                                              for s in per_seed])
    results = {
        "task": "text classification, held-out validation split",
        "command": command_line(),
        "git": git_state(),
        "hardware": hardware("cpu"),
        "data": {
            "csv": str(csv_path),
            "sha256": file_sha256(csv_path),
            "rows_used": len(data.texts),
            "skipped_empty_text": data.skipped_empty_text,
            "skipped_empty_label": data.skipped_empty_label,
            "labels": data.labels,
            "split_seed": split_seed,
            "val_fraction": settings.val_fraction,
            "train_rows": len(train_texts),
            "val_rows": len(val_texts),
        },
        "settings": {k: v for k, v in settings.to_dict().items() if k != "seed"},
        "model": {"config": run.model_config.to_dict(), "parameters": run.n_parameters},
        "baseline_settings": dataclasses.asdict(BaselineSettings()),
        "seeds": per_seed,
        "summary": summary,
        "seconds": time.perf_counter() - started,
    }
    seed0, transformer0, baseline0 = first_confusions
    # The four files appear together (out_dir may also hold other experiments' folders and their summary).
    with files_written_together(out_dir, kind=EXPERIMENT_KIND) as staging:
        atomic_write_bytes(staging / "results.json", json.dumps(results, indent=2).encode())
        plot_confusions([(f"Transformer (seed {seed0})", transformer0.confusion),
                         ("TF-IDF + LR", baseline0.confusion)], data.labels, staging / "confusion.png")
        plot_learning_curves(histories, staging / "learning_curve.png", summary["baseline"]["macro_f1"]["mean"])
        atomic_write_bytes(staging / "table.md", table_markdown(results, transformer0, baseline0).encode())
    return results


def table_markdown(results: dict[str, Any], transformer0: Metrics, baseline0: Metrics) -> str:
    s, data = results["summary"], results["data"]
    seeds = [r["seed"] for r in results["seeds"]]
    labels = data["labels"]

    def cell(model: str, metric: str) -> str:
        return f"{s[model][metric]['mean']:.4f} ± {s[model][metric]['std']:.4f}"

    rows = [
        "| model | parameters | accuracy | macro-F1 | " + " | ".join(f"macro-F1 seed {x}" for x in seeds) + " |",
        "|---|---:|---:|---:|" + "---:|" * len(seeds),
        f"| Transformer ({results['settings']['preset']}, {results['settings']['pooling']} pooling) | "
        f"{results['model']['parameters']:,} | {cell('transformer', 'accuracy')} | {cell('transformer', 'macro_f1')} | "
        + " | ".join(f"{r['transformer']['macro_f1']:.4f}" for r in results["seeds"]) + " |",
        f"| TF-IDF + logistic regression | – | {cell('baseline', 'accuracy')} | {cell('baseline', 'macro_f1')} | "
        + " | ".join(f"{r['baseline']['macro_f1']:.4f}" for r in results["seeds"]) + " |",
    ]
    last = s["transformer"]["last_epoch_macro_f1"]
    return "\n".join([
        f"# Text classification: {Path(data['csv']).name}",
        "",
        f"Held-out split: {data['val_rows']} of {data['rows_used']} rows ({data['val_fraction']:.0%}, stratified, "
        f"split seed {data['split_seed']}), the same for every seed and both models. Mean ± sample std over seeds "
        f"{', '.join(map(str, seeds))}.",
        "",
        *rows,
        "",
        configuration_line(results),
        "",
        f"Early stopping picks the Transformer's epoch on this same split. Without that choice (last epoch): "
        f"macro-F1 {last['mean']:.4f} ± {last['std']:.4f}.",
        "",
        f"Confusion matrices (seed {seeds[0]}; rows true, columns predicted):",
        "",
        "Transformer:",
        "",
        confusion_markdown(transformer0.confusion, labels),
        "",
        "TF-IDF + logistic regression:",
        "",
        confusion_markdown(baseline0.confusion, labels),
        "",
        "![confusion matrices](confusion.png)",
        "",
        "![learning curves](learning_curve.png)",
        "",
        f"Command: `{results['command']}`  ",
        f"Commit: `{results['git']['commit']}`" + (" (with uncommitted changes)" if results["git"]["dirty"] else "")
        + "  ",
        f"Hardware: {results['hardware']['processor']}, {results['hardware']['cpu_count']} CPUs, "
        f"torch {results['hardware']['torch']} ({results['hardware']['torch_threads']} thread(s)); "
        f"{results['seconds'] / 60:.1f} min in all.",
        "",
    ])


def configuration_line(results: dict[str, Any]) -> str:
    st, m, b = results["settings"], results["model"]["config"], results["baseline_settings"]
    extra = f" + columns {', '.join(st['extra_text_columns'])} prepended" if st["extra_text_columns"] else ""
    return (
        f"Transformer: {st['tokenizer']} tokenizer ({m['vocab_size']} tokens{', lowercased' if st['lowercase'] else ''}"
        f"{extra}), max_len {st['max_len']}; encoder d_model {m['d_model']}, {m['n_heads']} heads, "
        f"{m['n_encoder_layers']} layers, d_ff {m['d_ff']}, {m['norm']}-norm, {m['positions']} positions, dropout "
        f"{m['dropout']}, {st['pooling']} pooling; AdamW lr {st['lr']:g} (warmup {st['warmup']} steps, linear decay), "
        f"weight decay {st['weight_decay']:g}, batch {st['batch_size']}, clip {st['clip']:g}, up to {st['epochs']} "
        f"epochs, patience {st['patience']}, {st['precision']}. Baseline: TF-IDF word 1-{b['ngram_max']}-grams"
        f"{' (sublinear tf)' if b['sublinear_tf'] else ''} + logistic regression (C={b['C']:g}), on the same texts."
    )


__all__ = ["run_experiment", "mean_std", "table_markdown"]
