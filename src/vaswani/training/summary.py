"""What a run did: the summary :meth:`Trainer.fit` returns and ``vaswani train`` writes as ``RUN/summary.json``, with
the plan that fitted its model to the clock (training/budget.py)."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from pathlib import Path

from vaswani.evaluation.selection import FinalChoice
from vaswani.records import read_record, write_record
from vaswani.training.config import TrainConfig
from vaswani.training.device_choices import CompilationCounts
from vaswani.training.resume import Progress

SUMMARY_FILE = "summary.json"


class Stop(enum.Enum):
    """Why a run stopped (the summary's ``stop_reason``)."""

    MAX_EPOCHS = "max_epochs"
    MAX_STEPS = "max_steps"
    MAX_MINUTES = "max_minutes"
    EARLY_STOP = "early_stop"
    INTERRUPTED = "interrupted"


@dataclass
class Measurement:
    """How fast one candidate trained on this machine, and the epochs that rate completes in the time left."""

    model: str
    tokens_per_second: float
    epochs_in_budget: float


@dataclass
class BudgetPlan:
    """The candidate the run trains, with every measurement that chose it (the run's summary.json keeps it)."""

    model: str
    settings: list[str]  # what made the chosen model from the preset
    epochs: int  # the epochs a model had to complete in the budget to be chosen (or the clock ends it first)
    minutes_left: float  # the training budget once the measuring is done
    measurements: list[Measurement]

    def describe(self) -> str:
        rates = ", ".join(f"{m.model} {m.tokens_per_second:,.0f} tokens/s ({m.epochs_in_budget:.1f} epochs)"
                          for m in self.measurements)
        fits = any(m.epochs_in_budget >= self.epochs for m in self.measurements)
        verdict = (f"the largest that completes {self.epochs} epochs" if fits
                   else f"none completes {self.epochs} epochs: the clock ends the run")
        return f"fitting the model to {self.minutes_left:.1f} minutes: {rates}; training {self.model} ({verdict})"


def limit_reached(training: TrainConfig, progress: Progress) -> Stop | None:
    """The limit of ``train.max_steps``, ``train.max_minutes`` or ``train.max_epochs`` a run has reached, if any."""
    if training.max_steps is not None and progress.step >= training.max_steps:
        return Stop.MAX_STEPS
    if training.max_minutes is not None and progress.elapsed_seconds >= 60 * training.max_minutes:
        return Stop.MAX_MINUTES
    if training.max_epochs is not None and progress.epoch >= training.max_epochs:
        return Stop.MAX_EPOCHS
    return None


@dataclass
class RunSummary:
    stop_reason: Stop
    step: int  # optimizer updates taken
    epoch: int  # epochs completed
    best_metric: float | None  # the best validation value of train.early_stopping_metric (lower is better)
    skipped_updates: int  # non-finite updates that changed no weight
    minutes: float  # training time of every session of the run, evaluations and checkpoints included
    world_size: int
    signal: str | None = None  # the signal that stopped the run ("SIGTERM"), when one did
    ranks_identical: bool | None = None  # distributed runs: whether every rank ended with the same weights
    mfu: float | None = None  # on a GPU: model FLOPs utilisation over this session's whole wall time
    compilation: CompilationCounts | None = None  # a compiled run: its graphs, recompiles, CUDA-graph replays
    # written by `vaswani train` (training/run.py): the final model's headline and the time it took, and the time the
    # user waited for (data preparation, training and the final model; not Python's start-up)
    scale_up: BudgetPlan | None = None  # the model train.scale_up_models chose for this machine, and why
    final: FinalChoice | None = None
    final_minutes: float | None = None
    wall_minutes: float | None = None
    # of train.max_minutes, what the run left unused when its epochs or early stopping ended it first, and why
    unused_minutes: float | None = None
    unused_because: str | None = None

    @classmethod
    def read(cls, run_dir: str | Path) -> RunSummary:
        """The summary of the finished run in ``run_dir``; a damaged field is one error naming it."""
        return read_record(cls, Path(run_dir) / SUMMARY_FILE)

    def write(self, run_dir: str | Path) -> None:
        write_record(Path(run_dir) / SUMMARY_FILE, self)


__all__ = ["SUMMARY_FILE", "BudgetPlan", "Measurement", "RunSummary", "Stop", "limit_reached"]
