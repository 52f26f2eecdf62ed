"""`vaswani classify summary`: one README over several `classify experiment` folders, every sentence chosen by
comparing their numbers.

    vaswani classify summary results/classifier results/classifier/bpe results/classifier/keyword

The first folder is the reference; each other folder is named by the settings in which it differs from the
reference. A difference between two configurations counts as real only when it is larger than the seed standard
deviation of either, the spread one configuration shows on its own from training randomness alone; with three
seeds that is a rough yardstick, and the README says so.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from vaswani.classification.experiment import configuration_line
from vaswani.classification.results import ExperimentResults, MeanStd, read_results
from vaswani.classification.settings import TrainSettings
from vaswani.errors import VaswaniError
from vaswani.io import MANIFEST_FILE, atomic_write_text, read_manifest, verify_files
from vaswani.provenance import command_line, git_state

# Settings that vary per run by design, not per configuration.
_PER_RUN = ("seed", "split_seed")
# What must match for two experiments to be compared: the same texts in the same held-out split.
_SPLIT_KEYS = ("sha256", "split_seed", "val_fraction", "val_rows", "labels")


@dataclass
class Experiment:
    """The results of one ``classify experiment`` and the folder they were read from."""

    folder: Path
    results: ExperimentResults


def load_experiment(folder: str | Path) -> Experiment:
    """The results.json of a ``classify experiment`` folder: checked against the folder's manifest, and every
    field against what the experiment writes."""
    from vaswani.classification.experiment import EXPERIMENT_KIND  # its module trains: torch

    path = Path(folder) / "results.json"
    manifest = read_manifest(folder) if Path(folder).is_dir() else None
    if manifest is not None:
        if manifest.kind != EXPERIMENT_KIND:
            raise VaswaniError(f"{folder} is a {manifest.kind} (see its {MANIFEST_FILE}), not a classifier "
                               "experiment; pass folders written by `vaswani classify experiment`")
        verify_files(folder, manifest)  # the experiment's files as they were written, the table it links too
    if not path.is_file():
        raise VaswaniError(f"{path}: not found; pass folders written by `vaswani classify experiment`")
    return Experiment(Path(folder), read_results(path))


def check_same_split(experiments: Sequence[Experiment]) -> None:
    """Refuse to compare experiments that were not scored on the same held-out texts."""
    reference = experiments[0]
    for other in experiments[1:]:
        for key in _SPLIT_KEYS:
            ours, theirs = getattr(other.results.data, key), getattr(reference.results.data, key)
            if ours != theirs:
                raise VaswaniError(
                    f"{other.folder}/results.json: data.{key} is {ours!r}, {reference.folder}/results.json "
                    f"has {theirs!r}; only experiments on the same CSV and held-out split can be compared")


def setting_differences(settings: TrainSettings, reference: TrainSettings) -> list[str]:
    """``key: value`` for every setting of a configuration that differs from the reference's."""
    return [f"{field.name}: {_show(getattr(settings, field.name))}" for field in dataclasses.fields(settings)
            if field.name not in _PER_RUN and getattr(settings, field.name) != getattr(reference, field.name)]


def configuration_name(experiment: Experiment, reference: Experiment) -> str:
    settings = experiment.results.settings
    if experiment is reference:
        return "defaults" if not setting_differences(settings, TrainSettings()) else "reference"
    return ", ".join(f"`{d}`" for d in setting_differences(settings, reference.results.settings)) or (
        "same settings as the reference")


def _show(value: Any) -> str:
    if isinstance(value, list):
        return " ".join(map(str, value)) or "none"
    if isinstance(value, dict):
        return " ".join(f"{k}={v}" for k, v in value.items()) or "none"
    return str(value)


def _stat(experiment: Experiment, model: str, metric: str = "macro_f1") -> tuple[float, float]:
    scores: MeanStd = getattr(getattr(experiment.results.summary, model), metric)
    return scores.mean, scores.std


def _points(difference: float) -> str:
    return f"{100 * difference:+.1f} points"


def _noise_verdict(difference: float, noise: float) -> str:
    if noise == 0:
        return "one seed, so no spread to compare with"
    if abs(difference) <= noise:
        return f"level, within one seed standard deviation ({100 * noise:.1f} points)"
    return f"{'ahead' if difference > 0 else 'behind'} by {abs(difference) / noise:.1f} seed standard deviations"


def findings(experiments: Sequence[Experiment]) -> list[str]:
    """The README's bullet points, each worded from the numbers it states."""
    reference = experiments[0]
    names = [configuration_name(e, reference) for e in experiments]
    lines = []
    for name, e in zip(names, experiments):
        ours, ours_std = _stat(e, "transformer")
        baseline, _ = _stat(e, "baseline")
        lines.append(f"{name}: the Transformer scores {ours:.3f} macro-F1 against TF-IDF + LR's {baseline:.3f}, "
                     f"{_points(ours - baseline)}: {_noise_verdict(ours - baseline, ours_std)}.")
    ref_ours, ref_std = _stat(reference, "transformer")
    ref_baseline, _ = _stat(reference, "baseline")
    for name, e in zip(names[1:], experiments[1:]):
        ours, std = _stat(e, "transformer")
        baseline, _ = _stat(e, "baseline")
        line = (f"{name} against {names[0]}: the Transformer moves {_points(ours - ref_ours)} "
                f"({ref_ours:.3f} → {ours:.3f}), {_noise_verdict(ours - ref_ours, max(std, ref_std))}")
        if abs(baseline - ref_baseline) > 0.0005:  # beyond the 3 decimals printed: the baseline's texts changed
            line += f"; the baseline {_points(baseline - ref_baseline)} ({ref_baseline:.3f} → {baseline:.3f})"
        else:
            line += "; the baseline does not move"
        lines.append(line + ".")
    lines.append(_errors_line(names, experiments))
    lines.append(_early_stopping_line(names, experiments))
    return lines


def _errors_line(names: Sequence[str], experiments: Sequence[Experiment]) -> str:
    """Misclassified validation texts per true class, first seed of each configuration, both models."""
    labels = experiments[0].results.data.labels
    parts = []
    for name, e in zip(names, experiments):
        first = e.results.seeds[0]
        counts = {model: [sum(row) - row[i] for i, row in enumerate(getattr(first, model).confusion)]
                  for model in ("transformer", "baseline")}
        per_class = "; ".join(f"true `{label}` {counts['transformer'][i]} vs {counts['baseline'][i]}"
                              for i, label in enumerate(labels))
        parts.append(f"{name} (seed {first.seed}): {per_class}")
    return ("Misclassified validation texts per true class, Transformer vs baseline: " + " · ".join(parts)
            + " (the confusion matrices are in each folder's `table.md`).")


def _early_stopping_line(names: Sequence[str], experiments: Sequence[Experiment]) -> str:
    """Early stopping picks the epoch on the split it is scored on; the last epoch involves no choice."""
    parts, largest_gap = [], 0.0
    for name, e in zip(names, experiments):
        best, std = _stat(e, "transformer")
        last, last_std = _stat(e, "transformer", "last_epoch_macro_f1")
        parts.append(f"{last:.4f} ± {last_std:.4f} ({name})")
        largest_gap = max(largest_gap, (best - last) / std if std else (0.0 if best == last else float("inf")))
    verdict = ("the same or within one seed standard deviation of the chosen epoch in every configuration, so the "
               "choice does not flatter these numbers" if largest_gap <= 1 else
               "lower than the chosen epoch by more than one seed standard deviation in at least one "
               "configuration: read the chosen-epoch numbers as optimistic")
    return ("Early stopping picks the Transformer's epoch on this same split. The last epoch, which involves no "
            f"choice, scores {', '.join(parts)}: {verdict}.")


def summary_markdown(experiments: Sequence[Experiment], out: Path) -> str:
    reference = experiments[0]
    data = reference.results.data
    seeds = sorted({s.seed for e in experiments for s in e.results.seeds})
    names = [configuration_name(e, reference) for e in experiments]
    git = git_state()
    commit = git.commit + (" (with uncommitted changes)" if git.dirty else "") if git.commit else "unknown"

    def cell(e: Experiment, model: str, metric: str) -> str:
        mean, std = _stat(e, model, metric)
        return f"{mean:.4f} ± {std:.4f}" if model == "transformer" else f"{mean:.4f}"

    def link(e: Experiment) -> str:
        folder = Path(os.path.relpath(e.folder, out.parent)).as_posix()
        return f"[`{folder}/`]({folder}/table.md)"

    table = [
        "| configuration | Transformer macro-F1 | Transformer accuracy | TF-IDF + LR macro-F1 | TF-IDF + LR accuracy "
        "| seeds | folder |",
        "|---|---:|---:|---:|---:|---|---|",
    ] + [
        f"| {name} | {cell(e, 'transformer', 'macro_f1')} | {cell(e, 'transformer', 'accuracy')} | "
        f"{cell(e, 'baseline', 'macro_f1')} | {cell(e, 'baseline', 'accuracy')} | "
        f"{', '.join(str(s.seed) for s in e.results.seeds)} | {link(e)} |"
        for name, e in zip(names, experiments)
    ]
    label_counts = reference.results.seeds[0].baseline.confusion
    class_sizes = ", ".join(f"`{label}` {sum(row)}" for label, row in zip(data.labels, label_counts))
    minutes = ", ".join(f"{e.results.seconds / 60:.1f} min ({name})" for name, e in zip(names, experiments))
    sections = [
        "# Text classifier: Transformer vs TF-IDF + logistic regression",
        f"Written by `{command_line()}` at commit `{commit}` from the folders in the table; each folder's "
        "`results.json` holds its own command, commit and hardware, the results per seed and per epoch, and its "
        "`table.md` the confusion matrices (`confusion.png`, first seed) and learning curves (`learning_curve.png`).",
        f"Data: `{data.csv}` ({data.rows_used:,} labelled rows). Held-out split: {data.val_rows:,} rows "
        f"({data.val_fraction:.0%}, stratified, split seed {data.split_seed}; by true class {class_sizes}), "
        "the same texts for every configuration, seed and model. Mean ± sample standard deviation over the training "
        f"seeds; the baseline is deterministic, so it has one value per configuration.",
        "\n".join(table),
        "## What this shows\n\n" + "\n".join(f"- {line}" for line in findings(experiments)),
        "A seed standard deviation from so few seeds is itself uncertain: a difference a little beyond it is a "
        "lead, not a proof.",
        f"## The {names[0]} configuration\n\n" + configuration_line(reference.results)
        + f" {reference.results.model.parameters:,} parameters.",
        "## Reproduce\n\n```bash\n" + "\n".join(e.results.command for e in experiments)
        + f"\n{command_line()}\n```\n\n"
        f"Wall time of each experiment: {minutes}.",
        f"## Not measured\n\nOne held-out split (split seed {data.split_seed}) and {len(seeds)} training "
        f"seed{'s' if len(seeds) > 1 else ''}; "
        "no cross-validation, no held-out test set. The baseline keeps its fixed settings in every configuration.",
    ]
    return "\n\n".join(sections) + "\n"


def write_summary(folders: Sequence[str | Path], out: str | Path | None = None) -> Path:
    """Read the experiments, check they share a split, write the README (default: the first folder's)."""
    experiments = [load_experiment(folder) for folder in folders]
    check_same_split(experiments)
    out = Path(out) if out is not None else Path(folders[0]) / "README.md"
    atomic_write_text(out, summary_markdown(experiments, out))
    return out


__all__ = ["Experiment", "check_same_split", "configuration_name", "findings", "load_experiment",
           "setting_differences", "summary_markdown", "write_summary"]
