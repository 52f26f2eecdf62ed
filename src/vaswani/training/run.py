"""A run as ``vaswani train`` makes it: the directory locked and checked, the Trainer's loop, the final model, and
``summary.json``."""

from __future__ import annotations

import contextlib
import os
import time
from pathlib import Path
from typing import Sequence

from vaswani.devices import device_type
from vaswani.errors import is_out_of_memory, out_of_memory
from vaswani.training.budget import fit_to_budget, fits_to_budget
from vaswani.training.callbacks import Callback
from vaswani.training.config import RunConfig
from vaswani.training.data import settle
from vaswani.training.device_choices import check_threads
from vaswani.training.distributed import init_world
from vaswani.training.finalize import finalize
from vaswani.training.rundir import check_start, lock_run_directory
from vaswani.training.summary import RunSummary, Stop
from vaswani.training.trainer import Trainer


def train(config: RunConfig, run_dir: str | Path, resume: bool = False, start_over: bool = False,
          callbacks: Sequence[Callback] = ()) -> RunSummary | None:
    """Train a new run in ``run_dir`` (or continue it with ``resume``), choose its final model when
    ``train.final_model`` is set (training/finalize.py), and write its ``summary.json``. The directory is locked for
    the whole run, and a start that would mix two runs is refused (``start_over`` moves the earlier run aside).
    Memory that runs out is one EnvironmentFault naming this run's batch and model sizes. Returns the summary on
    the main process (None on the other ranks)."""
    started = time.perf_counter()
    run_dir = Path(run_dir)
    check_threads(config.train)
    is_main = int(os.environ.get("RANK", "0")) == 0  # under torchrun, rank 0 owns the directory
    with lock_run_directory(run_dir) if is_main else contextlib.nullcontext():
        if is_main:
            check_start(run_dir, resume=resume, start_over=start_over)
        try:
            plan = None
            if fits_to_budget(config) and not resume:  # a resumed run keeps the model it chose
                config, plan = fit_to_budget(config, run_dir)
            world = init_world(device_type(config.train.device))
            # the corpus, the clock fit and the data's vocabulary are resolved: nothing below changes the config
            config, data = settle(config, run_dir, world, resuming=resume)
            trainer = Trainer(config, run_dir, resume=resume, world=world, callbacks=callbacks, data=data)
            summary = trainer.fit()
        except (MemoryError, RuntimeError) as error:
            if not is_out_of_memory(error):
                raise
            raise out_of_memory(error, memory_settings(config)) from None
        if not trainer.world.is_main:
            return None
        if config.train.final_model and summary.stop_reason is not Stop.INTERRUPTED:
            finalizing = time.perf_counter()
            summary.final = finalize(run_dir, config, trainer.device, trainer.precision).headline()
            summary.final_minutes = round((time.perf_counter() - finalizing) / 60, 2)
        summary.scale_up = plan
        summary.unused_minutes, summary.unused_because = unused_budget(config, summary)
        if summary.unused_minutes:
            print(f"the run ended {summary.unused_minutes:.1f} of its train.max_minutes={config.train.max_minutes:g} "
                  f"early: {summary.unused_because}", flush=True)
        summary.wall_minutes = round((time.perf_counter() - started) / 60, 2)
        summary.write(run_dir)
        return summary


def unused_budget(config: RunConfig, summary: RunSummary) -> tuple[float | None, str | None]:
    """The minutes of ``train.max_minutes`` a run left unused, and why: the clock fit chooses the largest model
    that completes its epochs in the budget, so a fast machine may finish them, or stop early, with time to spare."""
    training = config.train
    if training.max_minutes is None or summary.stop_reason not in (Stop.MAX_EPOCHS, Stop.EARLY_STOP):
        return None, None
    unused = round(training.max_minutes - summary.minutes, 1)
    if unused < 1:
        return None, None
    if summary.stop_reason is Stop.EARLY_STOP:
        return unused, (f"early stopping: the validation loss did not improve for {training.patience} evaluations once "
                        "the learning rate was low")
    larger = (", and no larger model of train.scale_up_models completes them in the time" if training.scale_up_models
              else "")
    return unused, f"its {training.max_epochs} epochs (train.max_epochs) were done{larger}"


def memory_settings(config: RunConfig) -> str:
    """What sizes a training step's memory, with this run's values."""
    training, model = config.train, config.model
    return (f"train.max_tokens={training.max_tokens} (and raise train.grad_accum={training.grad_accum} to keep the "
            f"tokens per update), data.max_len={config.data.max_len} or the model (model.d_model={model.d_model}, "
            f"model.d_ff={model.d_ff}, model.n_encoder_layers={model.n_encoder_layers}, "
            f"model.n_decoder_layers={model.n_decoder_layers})")


__all__ = ["memory_settings", "train"]
