"""The published classifier result: the Transformer and the TF-IDF baseline, several seeds, one held-out split.

    vaswani classify experiment --csv ../shared/data/disaster_tweets/train.csv --seeds 0 1 2 --out results/classifier

The held-out split is fixed (``split_seed``) and shared by every seed and both models, so the spread across seeds
is the Transformer's own training randomness (initialisation, dropout, batch order), and the two models are
compared on exactly the same texts. The baseline is deterministic: its spread is 0 by construction.
Writes ``results.json`` (the ``results.ExperimentResults`` record: per seed, mean ± std, command, commit,
hardware), ``table.md``, ``confusion.png`` (first seed) and ``learning_curve.png`` (every seed); the trained
models go to ``runs_dir``, not into results.
"""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path
from typing import Callable, Sequence

from vaswani.classification.baseline import BaselineSettings, baseline_metrics
from vaswani.classification.checkpoint import CLASSIFIER_KIND
from vaswani.classification.data import load_dataset
from vaswani.classification.metrics import Metrics
from vaswani.classification.report import confusion_markdown, plot_confusions, plot_learning_curves
from vaswani.classification.results import (
    BaselineSummary,
    DataSplit,
    ExperimentResults,
    MeanStd,
    ModelDescription,
    SeedResult,
    SeedSummary,
    TransformerScores,
    TransformerSummary,
    results_json,
)
from vaswani.classification.settings import TrainSettings
from vaswani.classification.train import train_classifier
from vaswani.io import (
    MANIFEST_FILE,
    atomic_write_bytes,
    directory_written_whole,
    file_sha256,
    files_written_together,
)
from vaswani.provenance import command_line, git_state, hardware

EXPERIMENT_KIND = "classifier experiment"
EXPERIMENT_WRITER = "classify experiment"
RESULT_FILES = ("results.json", "table.md", "confusion.png", "learning_curve.png", MANIFEST_FILE)
def run_experiment(
    csv_path: str | Path,
    seeds: Sequence[int],
    out_dir: str | Path,
    settings: TrainSettings,
    runs_dir: str | Path,
    split_seed: int = 0,
    progress: bool = True,
    log: Callable[[str], None] = print,
) -> ExperimentResults:
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
        metrics = run.val_metrics
        per_seed.append(SeedResult(seed, TransformerScores(
            metrics.accuracy, metrics.macro_f1, metrics.confusion, best_epoch=run.best_epoch,
            epochs_run=len(run.history), last_epoch_macro_f1=run.history[-1].val_macro_f1,
            last_epoch_accuracy=run.history[-1].val_accuracy, history=run.history, seconds=run.seconds),
            baseline))

    transformers, baselines = [s.transformer for s in per_seed], [s.baseline for s in per_seed]
    summary = SeedSummary(
        TransformerSummary(MeanStd.of([t.accuracy for t in transformers]),
                           MeanStd.of([t.macro_f1 for t in transformers]),
                           MeanStd.of([t.last_epoch_macro_f1 for t in transformers])),
        BaselineSummary(MeanStd.of([b.accuracy for b in baselines]),
                        MeanStd.of([b.macro_f1 for b in baselines])))
    split = DataSplit(str(csv_path), file_sha256(csv_path), rows_used=len(data.texts),
                      skipped_empty_text=data.skipped_empty_text,
                      skipped_empty_label=data.skipped_empty_label,
                      labels=data.labels, split_seed=split_seed, val_fraction=settings.val_fraction,
                      train_rows=len(train_texts), val_rows=len(val_texts))
    results = ExperimentResults(
        "text classification, held-out validation split", command_line(), git_state().to_json(),
        hardware("cpu").to_json(), split,
        settings, ModelDescription(run.model_config.to_dict(), run.n_parameters), BaselineSettings(),
        per_seed, summary, seconds=time.perf_counter() - started)
    seed0, transformer0, baseline0 = first_confusions
    # The four files appear together (out_dir may also hold other experiments' folders and their summary).
    with files_written_together(out_dir, kind=EXPERIMENT_KIND) as staging:
        atomic_write_bytes(staging / "results.json", json.dumps(results_json(results), indent=2).encode())
        plot_confusions([(f"Transformer (seed {seed0})", transformer0.confusion),
                         ("TF-IDF + LR", baseline0.confusion)], data.labels, staging / "confusion.png")
        plot_learning_curves(histories, staging / "learning_curve.png", summary.baseline.macro_f1.mean)
        atomic_write_bytes(staging / "table.md", table_markdown(results, transformer0, baseline0).encode())
    return results


def table_markdown(results: ExperimentResults, transformer0: Metrics, baseline0: Metrics) -> str:
    data = results.data
    seeds = [r.seed for r in results.seeds]
    labels = data.labels

    def cell(model: str, metric: str) -> str:
        scores = getattr(getattr(results.summary, model), metric)
        return f"{scores.mean:.4f} ± {scores.std:.4f}"

    rows = [
        "| model | parameters | accuracy | macro-F1 | " + " | ".join(f"macro-F1 seed {x}" for x in seeds) + " |",
        "|---|---:|---:|---:|" + "---:|" * len(seeds),
        f"| Transformer ({results.settings.preset}, {results.settings.pooling} pooling) | "
        f"{results.model.parameters:,} | {cell('transformer', 'accuracy')} | "
        f"{cell('transformer', 'macro_f1')} | "
        + " | ".join(f"{r.transformer.macro_f1:.4f}" for r in results.seeds) + " |",
        f"| TF-IDF + logistic regression | – | {cell('baseline', 'accuracy')} | {cell('baseline', 'macro_f1')} | "
        + " | ".join(f"{r.baseline.macro_f1:.4f}" for r in results.seeds) + " |",
    ]
    last = results.summary.transformer.last_epoch_macro_f1
    return "\n".join([
        f"# Text classification: {Path(data.csv).name}",
        "",
        f"Held-out split: {data.val_rows} of {data.rows_used} rows ({data.val_fraction:.0%}, stratified, "
        f"split seed {data.split_seed}), the same for every seed and both models. Mean ± sample std over "
        "seeds "
        f"{', '.join(map(str, seeds))}.",
        "",
        *rows,
        "",
        configuration_line(results),
        "",
        f"Early stopping picks the Transformer's epoch on this same split. Without that choice (last epoch): "
        f"macro-F1 {last.mean:.4f} ± {last.std:.4f}.",
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
        f"Command: `{results.command}`  ",
        f"Commit: `{results.git['commit']}`" + (" (with uncommitted changes)" if results.git["dirty"] else "")
        + "  ",
        f"Hardware: {results.hardware['processor']}, {results.hardware['cpu_count']} CPUs, "
        f"torch {results.hardware['torch']} ({results.hardware['torch_threads']} thread(s)); "
        f"{results.seconds / 60:.1f} min in all.",
        "",
    ])


def configuration_line(results: ExperimentResults) -> str:
    st, m, b = results.settings, results.model_config, results.baseline_settings
    extra = f" + columns {', '.join(st.extra_text_columns)} prepended" if st.extra_text_columns else ""
    return (
        f"Transformer: {st.tokenizer} tokenizer "
        f"({m.vocab_size} tokens{', lowercased' if st.lowercase else ''}"
        f"{extra}), max_len {st.max_len}; encoder d_model {m.d_model}, {m.n_heads} heads, "
        f"{m.n_encoder_layers} layers, d_ff {m.d_ff}, {m.norm}-norm, {m.positions} positions, dropout "
        f"{m.dropout}, {st.pooling} pooling; AdamW lr {st.lr:g} (warmup {st.warmup} steps, linear decay), "
        f"weight decay {st.weight_decay:g}, batch {st.batch_size}, clip {st.clip:g}, up to {st.epochs} "
        f"epochs, patience {st.patience}, {st.precision}. Baseline: TF-IDF word 1-{b.ngram_max}-grams"
        f"{' (sublinear tf)' if b.sublinear_tf else ''} + logistic regression (C={b.C:g}), on the same texts."
    )


__all__ = ["run_experiment", "table_markdown"]
