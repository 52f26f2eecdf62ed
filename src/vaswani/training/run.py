"""A run as ``vaswani train`` makes it: the directory locked and checked, the Trainer's loop, the final model, and
``summary.json``."""

from __future__ import annotations

import contextlib
import os
import time
from pathlib import Path
from typing import Sequence

from vaswani.errors import is_out_of_memory, out_of_memory
from vaswani.training.callbacks import Callback
from vaswani.training.config import RunConfig
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
    is_main = int(os.environ.get("RANK", "0")) == 0  # under torchrun, rank 0 owns the directory
    with lock_run_directory(run_dir) if is_main else contextlib.nullcontext():
        if is_main:
            check_start(run_dir, resume=resume, start_over=start_over)
        try:
            trainer = Trainer(config, run_dir, resume=resume, callbacks=callbacks)
            summary = trainer.fit()
        except (MemoryError, RuntimeError) as error:
            if not is_out_of_memory(error):
                raise
            raise out_of_memory(error, memory_settings(config)) from None
        if not trainer.world.is_main:
            return None
        if config.train.final_model and summary.stop_reason is not Stop.INTERRUPTED:
            from vaswani.training.finalize import finalize

            finalizing = time.perf_counter()
            summary.final = finalize(run_dir, config, trainer.device, trainer.precision).headline()
            summary.final_minutes = round((time.perf_counter() - finalizing) / 60, 2)
        summary.wall_minutes = round((time.perf_counter() - started) / 60, 2)
        summary.write(run_dir)
        return summary


def memory_settings(config: RunConfig) -> str:
    """What sizes a training step's memory, with this run's values."""
    tc, model = config.train, config.model
    return (f"train.max_tokens={tc.max_tokens} (and raise train.grad_accum={tc.grad_accum} to keep the tokens per "
            f"update), data.max_len={config.data.max_len} or the model (model.d_model={model.d_model}, "
            f"model.d_ff={model.d_ff}, model.n_encoder_layers={model.n_encoder_layers}, "
            f"model.n_decoder_layers={model.n_decoder_layers})")


__all__ = ["memory_settings", "train"]
