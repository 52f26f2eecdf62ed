"""What a reader needs to judge a classifier: metrics next to the baseline's, confusion matrices as markdown
tables and a PNG, learning curves, and where the numbers come from (command, commit, hardware).

Figures use matplotlib's Agg backend (no display needed) and, like every file here, are written atomically.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Sequence

from vaswani.classification.metrics import Metrics
from vaswani.io import atomic_write_bytes, atomic_write_figure


# ---- tables ----------------------------------------------------------------------------------------------------
def confusion_markdown(confusion: Sequence[Sequence[int]], labels: Sequence[str]) -> str:
    """Rows are the true class, columns the predicted one."""
    lines = [
        "| true \\ predicted | " + " | ".join(f"`{label}`" for label in labels) + " |",
        "|---|" + "---:|" * len(labels),
    ]
    for label, row in zip(labels, confusion):
        lines.append(f"| `{label}` | " + " | ".join(str(n) for n in row) + " |")
    return "\n".join(lines)


def metrics_markdown(rows: Sequence[tuple[str, Metrics]]) -> str:
    lines = ["| model | accuracy | macro-F1 |", "|---|---:|---:|"]
    lines += [f"| {name} | {m.accuracy:.4f} | {m.macro_f1:.4f} |" for name, m in rows]
    return "\n".join(lines)


# ---- figures ---------------------------------------------------------------------------------------------------
def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save_figure(figure, path: Path) -> None:
    atomic_write_figure(path, figure)
    _pyplot().close(figure)


def plot_confusions(panels: Sequence[tuple[str, Sequence[Sequence[int]]]], labels: Sequence[str], path: Path) -> None:
    """One confusion matrix per (title, matrix), side by side, counts written in the cells."""
    plt = _pyplot()
    size = max(3.0, 0.6 * len(labels) + 2.0)
    figure, axes = plt.subplots(1, len(panels), figsize=(size * len(panels), size), squeeze=False,
                                constrained_layout=True)
    for ax, (title, matrix) in zip(axes[0], panels):
        ax.imshow(matrix, cmap="Blues")
        peak = max(max(row) for row in matrix) or 1
        for i, row in enumerate(matrix):
            for j, n in enumerate(row):
                ax.text(j, i, str(n), ha="center", va="center", color="white" if n > peak / 2 else "black")
        ax.set_xticks(range(len(labels)), labels, rotation=45 if len(labels) > 4 else 0)
        ax.set_yticks(range(len(labels)), labels)
        ax.set_xlabel("predicted")
        ax.set_ylabel("true")
        ax.set_title(title)
    _save_figure(figure, path)


def plot_learning_curves(histories: dict[str, Sequence[Any]], path: Path, baseline_f1: float | None = None) -> None:
    """Training/validation loss and validation macro-F1 per epoch, one line per run (``EpochStats`` lists)."""
    plt = _pyplot()
    figure, (loss_ax, f1_ax) = plt.subplots(1, 2, figsize=(10, 4), constrained_layout=True)
    for i, (name, history) in enumerate(histories.items()):
        color = f"C{i}"
        epochs = [e.epoch for e in history]
        loss_ax.plot(epochs, [e.train_loss for e in history], color=color, linestyle="--", label=f"{name} train")
        loss_ax.plot(epochs, [e.val_loss for e in history], color=color, label=f"{name} validation")
        f1_ax.plot(epochs, [e.val_macro_f1 for e in history], color=color, marker="o", label=name)
    if baseline_f1 is not None:
        f1_ax.axhline(baseline_f1, color="gray", linestyle=":", label="TF-IDF + LR")
    loss_ax.set(xlabel="epoch", ylabel="cross-entropy", title="loss")
    f1_ax.set(xlabel="epoch", ylabel="macro-F1", title="validation macro-F1")
    loss_ax.legend(fontsize=7)
    f1_ax.legend(fontsize=7)
    _save_figure(figure, path)


# ---- one training run ------------------------------------------------------------------------------------------
def write_run_report(
    out_dir: str | Path,
    labels: Sequence[str],
    transformer: Metrics,
    baseline: Metrics,
    histories: dict[str, Sequence[Any]],
    details: dict[str, Any],
) -> Path:
    """``report.md``, ``metrics.json``, ``confusion.png`` and ``learning_curve.png`` in ``out_dir``."""
    out_dir = Path(out_dir)
    plot_confusions([("Transformer", transformer.confusion), ("TF-IDF + LR", baseline.confusion)], labels,
                    out_dir / "confusion.png")
    plot_learning_curves(histories, out_dir / "learning_curve.png", baseline.macro_f1)
    payload = {"transformer": transformer.to_dict(), "baseline": baseline.to_dict(), "labels": list(labels), **details}
    atomic_write_bytes(out_dir / "metrics.json", json.dumps(payload, indent=2, default=str).encode())
    text = "\n\n".join([
        "# Classifier evaluation (validation split)",
        metrics_markdown([("Transformer", transformer), ("TF-IDF + logistic regression", baseline)]),
        "## Confusion matrix: Transformer\n\n" + confusion_markdown(transformer.confusion, labels),
        "## Confusion matrix: TF-IDF + logistic regression\n\n" + confusion_markdown(baseline.confusion, labels),
        "![confusion matrices](confusion.png)\n\n![learning curve](learning_curve.png)",
        "## Run\n\n```json\n" + json.dumps(details, indent=2, default=str) + "\n```",
    ])
    atomic_write_bytes(out_dir / "report.md", (text + "\n").encode())
    return out_dir / "report.md"


__all__ = [
    "confusion_markdown", "metrics_markdown", "plot_confusions",
    "plot_learning_curves", "write_run_report",
]
