"""What a checkpoint holds to continue a run bit-exactly, and the checks before a run continues.

A checkpoint's ``trainer_state.pt`` holds the optimizer, schedule and gradient-scaler states, the run's
:class:`Progress` (updates taken, the position in the epoch's batch list, early stopping's count), the random
number generators (torch's, CUDA's per rank, Python's) and the run's config; the weights lie beside it
(``model.safetensors``). Restored, a run takes the update it would have taken next, bit for bit on a
deterministic device. It holds only tensors and plain containers, so loading it never executes code.
"""

from __future__ import annotations

import dataclasses
import json
import random
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import torch

from vaswani.errors import VaswaniError
from vaswani.io import atomic_write_text, parse_yaml
from vaswani.model import Transformer
from vaswani.model.serialization import load_weights
from vaswani.provenance import PROVENANCE_FILE, provenance
from vaswani.training.checkpoint import STATE_FILE, TrainerState, latest_checkpoint, load_trainer_state
from vaswani.training.config import DataConfig, RunConfig
from vaswani.training.parent import Parent
from vaswani.training.presets import apply_settings
from vaswani.training.rundir import check_start

# A training setting changed at a resume: {"train.lr_factor": (old, new)}.
Changes = dict[str, tuple[Any, Any]]


@dataclass
class Progress:
    """Where the run is; saved in every checkpoint."""

    step: int = 0  # optimizer updates done
    epoch: int = 0  # current epoch (0-based)
    group_in_epoch: int = 0  # updates done within the current epoch
    best_metric: float | None = None
    evals_without_improvement: int = 0
    consecutive_nonfinite: int = 0
    skipped_updates: int = 0
    elapsed_seconds: float = 0.0


def trainer_state(progress: Progress, optimizer: torch.optim.Optimizer,
                  scheduler: torch.optim.lr_scheduler.LRScheduler, scaler: torch.amp.GradScaler,
                  config: RunConfig, device: torch.device) -> TrainerState:
    """The content of ``trainer_state.pt`` now."""
    return TrainerState(
        optimizer=optimizer.state_dict(),
        scheduler=scheduler.state_dict(),
        scaler=scaler.state_dict(),
        progress=dataclasses.asdict(progress),
        rng={"torch": torch.get_rng_state(),
             "cuda": torch.cuda.get_rng_state_all() if device.type == "cuda" else None,
             "python": _python_rng_to_list(random.getstate())},
        config_yaml=config.to_yaml(),
    )


@dataclass(frozen=True)
class ResumeState:
    """A checkpoint's ``trainer_state.pt``, read once: where it lies, the run's progress and config saved with it,
    and the states :func:`restore` loads back."""

    checkpoint_dir: Path
    progress: Progress
    config: RunConfig
    state: TrainerState


def read_resume_state(path: str | Path) -> ResumeState:
    """The trainer state of ``path``'s latest checkpoint (``path`` a run directory) or of the checkpoint ``path``."""
    checkpoint_dir, state = load_trainer_state(path)
    source = f"{checkpoint_dir}/{STATE_FILE}"
    config = RunConfig.from_dict(parse_yaml(state.config_yaml, source, "run's settings"), source=source)
    return ResumeState(checkpoint_dir, Progress(**state.progress), config, state)


def restore(resumed: ResumeState, model: Transformer, optimizer: torch.optim.Optimizer,
            scheduler: torch.optim.lr_scheduler.LambdaLR, scaler: torch.amp.GradScaler, device: torch.device,
            rank: int) -> None:
    """Load a checkpoint's weights and trainer state into a run built from its config. The caller sets the run's
    progress first: a schedule on the clock reads its elapsed time here. Rank 0 says where the run continues."""
    saved = resumed.state
    load_weights(model, resumed.checkpoint_dir / "model.safetensors", device)
    optimizer.load_state_dict(saved.optimizer)
    scheduler.load_state_dict(saved.scheduler)  # restores the step count, keeps this run's schedule
    # Recompute the current lr from *this* run's schedule: identical when unchanged (bit-exact resume), and an
    # explicitly changed schedule (--set train.lr_factor=...) takes effect from the first resumed update.
    for group, base, schedule in zip(optimizer.param_groups, scheduler.base_lrs, scheduler.lr_lambdas):
        group["lr"] = base * schedule(scheduler.last_epoch)
    scaler.load_state_dict(saved.scaler)
    torch.set_rng_state(saved.rng["torch"])
    if device.type == "cuda" and saved.rng.get("cuda") is not None:
        torch.cuda.set_rng_state(saved.rng["cuda"][min(rank, len(saved.rng["cuda"]) - 1)])
    random.setstate(_python_rng_from(saved.rng["python"]))
    if rank == 0:
        announce_resume(resumed.checkpoint_dir, resumed.progress)


def announce_resume(checkpoint_dir: Path, progress: Progress) -> None:
    print(f"resumed from {checkpoint_dir} at step {progress.step} (epoch {progress.epoch + 1}, update "
          f"{progress.group_in_epoch} of the epoch)", file=sys.stderr)


def check_resumable(config: RunConfig, state: ResumeState, announce: bool) -> Changes:
    """Refuse a resume that would change the model or the data under the checkpoint; return the training settings
    that differ from the run's saved ones (printed when ``announce``)."""
    saved = state.config
    if _without_data_dir(config.data) != _without_data_dir(saved.data):
        raise VaswaniError("`resume` cannot change data settings; start a new run directory instead")
    changed_model = sorted(key for key, value in config.model.to_dict().items() if value != saved.model.to_dict()[key])
    if changed_model:
        raise VaswaniError(f"`resume` cannot change the architecture ({changed_model}); start a new run "
                           "directory instead")
    changes = {f"train.{key}": (getattr(saved.train, key), getattr(config.train, key))
               for key in dataclasses.asdict(saved.train) if getattr(saved.train, key) != getattr(config.train, key)}
    if announce:
        for key, (old, new) in changes.items():
            print(f"resume: {key} changed {old!r} -> {new!r}", file=sys.stderr)
    return changes


def record_start(run_dir: Path, config: RunConfig, device: torch.device, precision: str, world_size: int,
                 resumed: bool, changes: Changes, parent: Parent | None = None) -> None:
    """The resolved config, and one provenance line per start or resume (with the settings it changed, and the
    checkpoint a fine-tuned run started from)."""
    run_dir.mkdir(parents=True, exist_ok=True)
    atomic_write_text(run_dir / "config.yaml", config.to_yaml())
    record = {**provenance(device).to_json(), "precision": precision, "world_size": world_size,
              "torch_threads": torch.get_num_threads(), "resumed": resumed}
    if parent is not None:
        record["init_from"] = parent.record()
    if changes:
        record["changed_settings"] = {key: [old, new] for key, (old, new) in changes.items()}
    with (run_dir / PROVENANCE_FILE).open("a") as handle:
        handle.write(json.dumps(record) + "\n")


def resumed_config(run_dir: str | Path, settings: Sequence[str] = ()) -> RunConfig:
    """The config a resumed run continues with: the one saved in its latest checkpoint, changed only by the
    ``section.key=value`` settings given now (what ``vaswani train --resume --set ...`` passes)."""
    if latest_checkpoint(Path(run_dir) / "checkpoints") is None:
        check_start(Path(run_dir), resume=True, start_over=False)  # names what the directory holds instead
    return apply_settings(read_resume_state(run_dir).config, list(settings))


def _without_data_dir(data: DataConfig) -> DataConfig:
    """Data settings that define the corpus (where its files lie may change between machines)."""
    return dataclasses.replace(data, data_dir=None)


def _python_rng_to_list(state: tuple) -> list:
    return [state[0], list(state[1]), state[2]]


def _python_rng_from(state: list) -> tuple:
    return (state[0], tuple(state[1]), state[2])


__all__ = ["Changes", "Progress", "ResumeState", "announce_resume", "check_resumable", "read_resume_state",
           "record_start", "restore", "resumed_config", "trainer_state"]
