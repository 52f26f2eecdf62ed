"""The record of one `classify experiment`: what ``experiment`` measures and writes to results.json, and
``summary`` reads back.

    results = run_experiment(...)                                     # an ExperimentResults
    text = json.dumps(results_json(results), indent=2)                # results.json
    results = read_results(Path("results/classifier/results.json"))  # every field checked, the file named

The training settings are written without the seed (it varies per run, see ``seeds``); the model's
configuration is ``ModelConfig.to_dict()`` and reads back through ``ModelConfig.from_dict``, which checks it.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from vaswani.classification.baseline import BaselineSettings
from vaswani.classification.metrics import Metrics
from vaswani.classification.settings import TrainSettings
from vaswani.classification.train import EpochStats
from vaswani.config import ModelConfig
from vaswani.errors import ConfigError, VaswaniError
from vaswani.io import read_json
from vaswani.records import from_json, to_json


@dataclass
class MeanStd:
    """Mean and sample standard deviation (n - 1; 0 for a single value) of one number over the seeds."""

    mean: float
    std: float
    min: float
    max: float

    @classmethod
    def of(cls, values: Sequence[float]) -> MeanStd:
        spread = statistics.stdev(values) if len(values) > 1 else 0.0
        return cls(statistics.fmean(values), spread, min(values), max(values))


@dataclass
class DataSplit:
    """The CSV and the held-out split every seed and both models are scored on."""

    csv: str
    sha256: str
    rows_used: int
    skipped_empty_text: int
    skipped_empty_label: int
    labels: list[str]
    split_seed: int
    val_fraction: float
    train_rows: int
    val_rows: int


@dataclass
class TransformerScores:
    """The Transformer of one seed on the held-out split: at the epoch early stopping chose, and at the last
    one (early stopping picks the epoch on this same split, a small optimistic bias the last epoch is free
    of)."""

    accuracy: float
    macro_f1: float
    confusion: list[list[int]]  # confusion[true][predicted]
    best_epoch: int
    epochs_run: int
    last_epoch_macro_f1: float
    last_epoch_accuracy: float
    history: list[EpochStats]
    seconds: float


@dataclass
class SeedResult:
    seed: int
    transformer: TransformerScores
    baseline: Metrics  # deterministic: the same for every seed


@dataclass
class TransformerSummary:
    accuracy: MeanStd
    macro_f1: MeanStd
    last_epoch_macro_f1: MeanStd


@dataclass
class BaselineSummary:
    accuracy: MeanStd
    macro_f1: MeanStd


@dataclass
class SeedSummary:
    """Mean ± std over the seeds of each model's scores."""

    transformer: TransformerSummary
    baseline: BaselineSummary


@dataclass
class ModelDescription:
    config: dict[str, Any]  # ModelConfig.to_dict() of the classifier's encoder
    parameters: int


@dataclass
class ExperimentResults:
    """Everything one `classify experiment` measured, and the command, commit and hardware behind it."""

    task: str
    command: str
    git: dict[str, Any]  # vaswani.provenance.git_state()
    hardware: dict[str, Any]  # vaswani.provenance.hardware()
    data: DataSplit
    settings: TrainSettings
    model: ModelDescription
    baseline_settings: BaselineSettings
    seeds: list[SeedResult]
    summary: SeedSummary
    seconds: float

    @property
    def model_config(self) -> ModelConfig:
        return ModelConfig.from_dict(self.model.config)


def results_json(results: ExperimentResults) -> dict[str, Any]:
    """``results`` as the JSON object of results.json: the settings without the per-run seed."""
    written = to_json(results)
    del written["settings"]["seed"]
    return written


def read_results(path: Path) -> ExperimentResults:
    """The results.json of a `classify experiment`, every field checked; a damaged one is a VaswaniError
    naming ``path`` and the field."""
    value = read_json(path, "experiment results")
    try:
        results = from_json(ExperimentResults, value, str(path))
        ModelConfig.from_dict(results.model.config)  # checked here, where the file can be named
    except ConfigError as error:  # a setting outside its range or choices
        raise VaswaniError(f"{path}: {error}; the file is damaged or was not written by vaswani") from None
    if not results.seeds:
        raise VaswaniError(f"{path}: no seeds; the file is damaged or was not written by vaswani")
    if any(len(seed.transformer.confusion) != len(results.data.labels)
           or len(seed.baseline.confusion) != len(results.data.labels) for seed in results.seeds):
        raise VaswaniError(f"{path}: a confusion matrix does not have one row per label")
    return results
