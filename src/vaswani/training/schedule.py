"""Learning-rate schedules as plain functions of the step (1-based), wrapped in a LambdaLR.

Early stopping reads the schedule too: while a schedule that follows the clock (``train.decay_on_clock``) is still
high, the validation loss stalls because the rate is high, not because the model is done, so an evaluation counts
towards ``train.patience`` only once the rate has fallen below :data:`EARLY_STOPPING_LR_FRACTION` of its peak.
"""

from __future__ import annotations

import math
from typing import Callable

import torch

from vaswani.training.config import TrainConfig

# An evaluation counts towards patience on a clock-driven schedule only below this fraction of the peak rate: on
# the cosine that is its last fifth.
EARLY_STOPPING_LR_FRACTION = 0.1


def noam_lr(step: int, d_model: int, warmup: int, factor: float = 1.0, ramp: bool = True) -> float:
    """lr = factor · d_model^-0.5 · min(step^-0.5, step · warmup^-1.5): linear warmup, then inverse square root.
    The two branches meet at step = warmup, where the rate peaks.

    ``ramp=False`` removes the warmup and nothing else: the rate starts at the same peak, holds it until
    ``warmup`` and then decays exactly as before, so a comparison with and without warmup changes one thing."""
    step = max(step, 1)
    if not ramp:
        step = max(step, warmup)
    return factor * d_model**-0.5 * min(step**-0.5, step * warmup**-1.5)


def decay_lr(step: int, peak: float, warmup: int, total: int, shape: str, min_ratio: float = 0.0,
             ramp: bool = True, clock: float = 0.0) -> float:
    """Linear warmup to ``peak``, then linear or cosine decay to ``peak · min_ratio`` at ``total`` steps.
    ``ramp=False``: hold ``peak`` for the warmup steps instead of climbing to it (same decay afterwards).
    ``clock``: the share of the run's time budget already used; the decay is at least that far along, so it
    reaches its end when the budget does even if fewer than ``total`` steps fit."""
    step = max(step, 1)
    if step <= warmup:
        return peak * (step / max(warmup, 1) if ramp else 1.0)
    if shape == "constant":
        return peak
    progress = min(max((step - warmup) / max(total - warmup, 1), clock), 1.0)
    if shape == "linear":
        scale = 1.0 - progress
    else:
        scale = 0.5 * (1.0 + math.cos(math.pi * progress))
    return peak * (min_ratio + (1.0 - min_ratio) * scale)


def learning_rate(step: int, config: TrainConfig, d_model: int, total_steps: int | None,
                  elapsed_seconds: float = 0.0) -> float:
    """The rate of update ``step``; ``elapsed_seconds`` of the run so far matter only with train.decay_on_clock."""
    if config.schedule == "noam":
        return noam_lr(step, d_model, config.warmup_steps, config.lr_factor, config.warmup_ramp)
    if config.schedule in {"linear", "cosine"} and total_steps is None:
        raise ValueError(f"train.schedule={config.schedule} needs a known length: set train.max_steps")
    clock = elapsed_seconds / (60 * config.max_minutes) if config.decay_on_clock and config.max_minutes else 0.0
    return decay_lr(step, config.lr, config.warmup_steps, total_steps or 0, config.schedule, config.min_lr_ratio,
                    config.warmup_ramp, clock)


def build_scheduler(
    optimizer: torch.optim.Optimizer, config: TrainConfig, d_model: int, total_steps: int | None,
    elapsed_seconds: Callable[[], float] = lambda: 0.0,
) -> torch.optim.lr_scheduler.LambdaLR:
    """Optimizer lrs are set to 1.0 so the lambda *is* the learning rate: LambdaLR multiplies base_lr by it.
    LambdaLR counts from 0; the schedule's step t is LambdaLR's t-1, so the first update uses step 1.
    ``elapsed_seconds`` reads the run's clock when the rate of the next update is set (train.decay_on_clock)."""
    for group in optimizer.param_groups:
        group["lr"] = 1.0
        group["initial_lr"] = 1.0
    return torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda index: learning_rate(index + 1, config, d_model, total_steps, elapsed_seconds())
    )


def planned_steps(config: TrainConfig, steps_per_epoch: int) -> int | None:
    """The updates a run plans, the length of its schedule: the fewer of ``train.max_steps`` and
    ``train.max_epochs``' updates (None: neither is set)."""
    limits = [config.max_steps] if config.max_steps else []
    if config.max_epochs:
        limits.append(steps_per_epoch * config.max_epochs)
    return min(limits) if limits else None


def early_stopping_counts(decay_on_clock: bool, lr: float, peak_lr: float) -> bool:
    """Whether an evaluation without improvement counts towards ``train.patience`` at learning rate ``lr``."""
    return not decay_on_clock or lr <= EARLY_STOPPING_LR_FRACTION * peak_lr
