"""Fitting a run to its clock: the same hour gives a better model on a faster machine, not the same model sooner.

A preset states how many epochs its schedule needs (``train.max_epochs``) and how long the run may take
(``train.max_minutes``). On a slow machine the clock ends the run first and the cosine follows the clock
(``train.decay_on_clock``); on a fast one the epochs end first and the rest of the hour goes unused. With
``train.scale_up_models`` the run first measures how fast this machine trains each larger model, then trains the
largest one that still completes the preset's epochs in the budget:

    candidates, smallest first: the preset's own model, then each entry of train.scale_up_models
    tokens/s of each, measured on the run's own batches for train.scale_up_probe_seconds (smallest first; a model
      too slow to complete the epochs ends the measuring, since every larger one is slower still)
    epochs in budget = tokens/s × seconds left / target tokens of an epoch
    chosen: the largest candidate whose epochs in budget ≥ train.scale_up_min_epochs (at most train.max_epochs),
      else the preset's own model; a model chosen for fewer epochs than train.max_epochs ends its cosine on the clock

Early stopping follows the same idea (training/schedule.py ``early_stopping_counts``).
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from vaswani.errors import ConfigError
from vaswani.training.config import RunConfig, TrainConfig, settings_of
from vaswani.training.data import settle
from vaswani.training.presets import apply_settings
from vaswani.training.summary import BudgetPlan, Measurement
from vaswani.training.trainer import Trainer


@dataclass(frozen=True)
class Candidate:
    """A model the run may train: its name and the settings that make it from the preset (none for the preset's)."""

    name: str
    settings: tuple[str, ...]


def candidates(scale_up_models: Sequence[str]) -> list[Candidate]:
    """The preset's own model, then each ``scale_up_models`` entry (``section.key=value`` items separated by
    spaces)."""
    return [Candidate(PRESET_MODEL, ())] + [Candidate(entry, settings_of(entry)) for entry in scale_up_models]


PRESET_MODEL = "the preset's model"


def plan_for_budget(options: Sequence[Candidate], measure: Callable[[Candidate], tuple[float, int]],
                    seconds_left: Callable[[], float], epochs: int) -> BudgetPlan:
    """The largest of ``options`` (smallest first) whose measured rate completes ``epochs`` epochs in the seconds
    left after measuring it; the first option when none does. ``measure`` returns a candidate's target tokens per
    second and the target tokens of an epoch; ``seconds_left`` reads the budget's clock."""
    measurements: list[Measurement] = []
    chosen = options[0]
    for option in options:
        rate, tokens_per_epoch = measure(option)
        measurements.append(Measurement(option.name, rate, rate * seconds_left() / tokens_per_epoch))
        if measurements[-1].epochs_in_budget < epochs:
            break  # a larger model is slower still
        chosen = option
    return BudgetPlan(chosen.name, list(chosen.settings), epochs, seconds_left() / 60, measurements)


def tokens_per_second(step: Callable[[], int], seconds: float, warmup_steps: int = 1,
                      clock: Callable[[], float] = time.perf_counter) -> float:
    """Target tokens per second of ``step`` (one update; it returns the update's target tokens), timed for at least
    ``seconds`` and one update after ``warmup_steps`` untimed ones (the first update of a model allocates its
    buffers and optimizer state)."""
    for _ in range(warmup_steps):
        step()
    start = clock()
    tokens = 0
    while True:
        tokens += step()
        elapsed = clock() - start
        if elapsed >= seconds:
            return tokens / elapsed


def epochs_to_complete(training: TrainConfig) -> int:
    """The epochs a larger model must complete in the budget to be chosen: ``train.scale_up_min_epochs``, at most
    the schedule's ``train.max_epochs``."""
    return min(training.scale_up_min_epochs or training.max_epochs, training.max_epochs)


def fits_to_budget(config: RunConfig) -> bool:
    """Whether a new run of ``config`` chooses its model by the clock: models to choose from, and a budget."""
    training = config.train
    return bool(training.scale_up_models) and training.max_minutes is not None and training.max_epochs is not None


def fit_to_budget(config: RunConfig, run_dir: Path) -> tuple[RunConfig, BudgetPlan]:
    """``config`` with the model that ``train.scale_up_models`` chooses for this machine, and the plan that chose
    it. Each candidate trains on the run's own first batches in a Trainer of its own, which writes nothing and is
    dropped; the measuring's time comes out of ``train.max_minutes``."""
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        raise ConfigError("train.scale_up_models measures one process; under torchrun set the model yourself "
                          "(train.scale_up_models=)", field="train.scale_up_models")
    training, clock_started = config.train, time.perf_counter()

    def measure(candidate: Candidate) -> tuple[float, int]:
        settled, data = settle(apply_settings(config, list(candidate.settings)), run_dir)
        trainer = Trainer(settled, run_dir, data=data)
        rate = tokens_per_second(trainer.unrecorded_updates().__next__, training.scale_up_probe_seconds)
        return rate, sum(trainer.data.target_tokens(b) for b in trainer.data.epoch_batches(0))

    def seconds_left() -> float:
        return 60 * training.max_minutes - (time.perf_counter() - clock_started)

    plan = plan_for_budget(candidates(training.scale_up_models), measure, seconds_left, epochs_to_complete(training))
    print(plan.describe(), flush=True)
    chosen = apply_settings(config, plan.settings)
    # at least a few updates' time, even where the measuring took the whole budget
    minutes_left = max(round(plan.minutes_left, 2), 0.01)
    return dataclasses.replace(chosen, train=dataclasses.replace(chosen.train, max_minutes=minutes_left)), plan
