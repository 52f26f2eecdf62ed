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
    chosen: the largest candidate whose epochs in budget ≥ train.max_epochs, else the preset's own model

Early stopping follows the same idea: while a schedule that follows the clock is still high, the validation loss
stalls because the rate is high, not because the model is done, so an evaluation counts towards
``train.patience`` only once the rate has fallen below :data:`EARLY_STOPPING_LR_FRACTION` of its peak.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

# An evaluation counts towards patience on a clock-driven schedule only below this fraction of the peak rate: on
# the cosine that is its last fifth.
EARLY_STOPPING_LR_FRACTION = 0.1


@dataclass(frozen=True)
class Candidate:
    """A model the run may train: its name and the settings that make it from the preset (none for the preset's)."""

    name: str
    settings: tuple[str, ...]


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
    epochs: int  # the preset's epochs: the chosen model completes them in the budget (or the clock ends it first)
    minutes_left: float  # the training budget once the measuring is done
    measurements: list[Measurement]

    def describe(self) -> str:
        rates = ", ".join(f"{m.model} {m.tokens_per_second:,.0f} tokens/s ({m.epochs_in_budget:.1f} epochs)"
                          for m in self.measurements)
        fits = any(m.epochs_in_budget >= self.epochs for m in self.measurements)
        verdict = (f"the largest that completes {self.epochs} epochs" if fits
                   else f"none completes {self.epochs} epochs: the clock ends the run")
        return f"fitting the model to {self.minutes_left:.1f} minutes: {rates}; training {self.model} ({verdict})"


def candidates(scale_up_models: Sequence[str]) -> list[Candidate]:
    """The preset's own model, then each ``scale_up_models`` entry (``section.key=value`` items separated by
    spaces)."""
    return [Candidate(PRESET_MODEL, ())] + [Candidate(entry, settings_of(entry)) for entry in scale_up_models]


PRESET_MODEL = "the preset's model"


def settings_of(entry: str) -> tuple[str, ...]:
    """The ``section.key=value`` items of one ``train.scale_up_models`` entry."""
    return tuple(entry.split())


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


def early_stopping_counts(decay_on_clock: bool, lr: float, peak_lr: float) -> bool:
    """Whether an evaluation without improvement counts towards ``train.patience`` at learning rate ``lr``."""
    return not decay_on_clock or lr <= EARLY_STOPPING_LR_FRACTION * peak_lr
