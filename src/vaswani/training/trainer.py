"""The training loop: teacher forcing, mixed precision, accumulation, DDP, evaluation, checkpoints, exact resume.

    trainer = Trainer(config, run_dir)     # device, data, model, optimizer (or the state of a resumed run)
    summary = trainer.fit()                # epochs of updates until a limit, evaluating and saving on the way

One *update* consumes a *group* of G = grad_accum × world_size consecutive batches of the epoch's deterministic
batch list; rank r takes batches r·accum … r·accum+accum-1 of the group. Every rank therefore knows every batch
of the group, so the loss can be normalised by the group's real target tokens without communication, and a run
on N ranks computes the same update as one process with grad_accum × N.
"""

from __future__ import annotations

import contextlib
import dataclasses
import enum
import itertools
import json
import math
import os
import random
import signal
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import torch
from torch.nn.parallel import DistributedDataParallel
from tqdm import tqdm

from vaswani.data.batching import Batch
from vaswani.devices import device_type, resolve_device, reuse_freed_memory
from vaswani.errors import EnvironmentFault, VaswaniError, is_out_of_memory
from vaswani.io import atomic_write_json, atomic_write_text
from vaswani.model import Transformer
from vaswani.model.serialization import load_weights
from vaswani.precision import resolve_precision
from vaswani.provenance import PROVENANCE_FILE, provenance
from vaswani.training import data as training_data
from vaswani.training.checkpoint import latest_checkpoint, load_trainer_state, point, prune, save_checkpoint
from vaswani.training.config import RunConfig, apply_settings
from vaswani.training.device_choices import (compile_options, defers_host_reads, loss_over_all_positions,
                                             recompile_limit)
from vaswani.training.distributed import World, collective_device, init_world, shutdown
from vaswani.training.flops import peak_flops, training_flops
from vaswani.training.loss import TranslationLoss
from vaswani.training.metrics import MetricsLog, plot_run
from vaswani.training.optim import build_optimizer
from vaswani.training.rundir import check_start, claim
from vaswani.training.schedule import build_scheduler
from vaswani.training.step import DeferredStepResult, StepResult, read_results, train_step

# Signals that end a run the way Ctrl-C does: finish the update in flight, save a checkpoint, exit. SIGTERM is how
# schedulers (Slurm, Kubernetes, systemd) stop a job.
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Stop(enum.Enum):
    """Why a run stopped (the summary's ``stop_reason``)."""

    MAX_EPOCHS = "finished"
    MAX_STEPS = "max_steps"
    MAX_MINUTES = "max_minutes"
    EARLY_STOP = "early_stop"
    INTERRUPTED = "interrupted"


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


class Callback:
    """Observes a run without changing it: pass instances to ``Trainer(callbacks=[...])`` and override the hooks
    you need (a study times every update with ``on_update_start``/``on_update_end``, for example)."""

    def on_update_start(self, trainer: Trainer) -> None:
        """Before the micro-batches of an update are taken (each was collated while the update before it ran)."""

    def on_update_end(self, trainer: Trainer, result: StepResult | DeferredStepResult) -> None:
        """After the optimizer step (or the skip of a non-finite update); with deferred host reads the result's
        values are still on the device (training/step.py)."""

    def on_evaluation_start(self, trainer: Trainer) -> None:
        """Before a validation pass."""

    def on_evaluation(self, trainer: Trainer, metrics: dict[str, Any]) -> None:
        """After a validation pass, before its checkpoint is written."""

    def on_checkpoint_start(self, trainer: Trainer, reason: str) -> None:
        """Before a checkpoint is written (reason: best, eval, periodic, interrupt)."""

    def on_checkpoint_end(self, trainer: Trainer, reason: str) -> None:
        """After the checkpoint is complete and ``last`` points at it."""


class Trainer:
    """One training run in ``run_dir``. ``resume=True`` continues the run from its latest checkpoint with
    ``config`` (build it with :func:`resumed_config` so the run keeps its own settings); the model and data
    settings must be the run's, training settings may change, and each change is printed and recorded in the
    run's provenance."""

    def __init__(self, config: RunConfig, run_dir: str | Path, resume: bool = False, world: World | None = None,
                 callbacks: Sequence[Callback] = ()):
        self.run_dir = Path(run_dir)
        self.callbacks = list(callbacks)
        self.world = world or init_world(device_type(config.train.device))
        self.config = config
        self.device, self.precision = self._set_up_device()
        # The choices that depend on the device (training/device_choices.py), made before any work so that a
        # refused one costs nothing.
        tc = config.train
        self.defer_reads = defers_host_reads(tc.host_sync, self.device)
        self.compile_options = compile_options(tc.compile, tc.cuda_graphs, self.device, bool(tc.length_buckets))
        saved = load_trainer_state(self.run_dir) if resume else None
        changes = self._check_resumable(*saved) if saved is not None else {}
        self.data = training_data.load(self.config, self.run_dir, self.world)
        self.config.model = dataclasses.replace(self.config.model, vocab_size=self.data.tokenizer.vocab_size,
                                                pad_id=self.data.tokenizer.pad_id)
        self._record_start(resumed=saved is not None, changes=changes)
        self.progress = Progress()
        self._build_model_and_optimizer()
        if saved is not None:
            self._restore(*saved)
        # The step of the newest checkpoint this process knows of: a resumed run starts at its checkpoint's.
        self.checkpointed_step: int | None = self.progress.step if saved is not None else None
        if self.world.rank > 0:  # dropout masks differ per rank, as they would across one process's micro-batches
            torch.manual_seed(self.config.train.seed + 1000 * self.world.rank + self.progress.step)
        self.loss_model = self._wrap_for_training()
        self.metrics = MetricsLog(self.run_dir, tensorboard=True) if self.world.is_main else None
        if self.metrics is not None and saved is not None:
            self.metrics.truncate_after(self.progress.step)
        self._peak: tuple[float, str] | None = None
        self._stop_signal: int | None = None
        # Updates whose results the host has not read yet: (update number, result, model FLOPs); with deferred
        # reads they wait for a log step, an evaluation, a checkpoint or the end.
        self._unread: list[tuple[int, StepResult | DeferredStepResult, float]] = []
        self._last_result: StepResult | None = None  # the newest update read
        self._log_window = _LogWindow()
        self._session_flops = 0.0  # model FLOPs of this session's updates that were taken, for the run's MFU

    # ---- building the trainer, in the order __init__ calls these ------------------------------------------------
    def _set_up_device(self) -> tuple[torch.device, str]:
        tc = self.config.train
        device = resolve_device(tc.device, self.world.local_rank)
        if tc.num_threads:
            torch.set_num_threads(tc.num_threads)
        if device.type == "cpu" and tc.reuse_freed_memory:
            reuse_freed_memory()
        if tc.deterministic:
            torch.use_deterministic_algorithms(True)
        return device, resolve_precision(tc.precision, device)

    def _check_resumable(self, checkpoint_dir: Path, state: dict) -> dict[str, tuple[Any, Any]]:
        """Refuse a resume that would change the model or the data under the checkpoint; return the training
        settings that differ from the run's saved ones, ``{"train.lr": (old, new)}``."""
        saved = _config_of(checkpoint_dir, state)
        if _without_data_dir(self.config.data) != _without_data_dir(saved.data):
            raise VaswaniError("--resume cannot change data settings; start a new run directory instead")
        changed_model = sorted(k for k, v in self.config.model.to_dict().items()
                               if v != saved.model.to_dict()[k] and k not in ("vocab_size", "pad_id"))
        if changed_model:
            raise VaswaniError(f"--resume cannot change the architecture ({changed_model}); start a new run "
                               "directory instead")
        changes = {f"train.{k}": (getattr(saved.train, k), getattr(self.config.train, k))
                   for k in dataclasses.asdict(saved.train) if getattr(saved.train, k) != getattr(self.config.train, k)}
        if self.world.is_main:
            for key, (old, new) in changes.items():
                print(f"resume: {key} changed {old!r} -> {new!r}", file=sys.stderr)
        return changes

    def _record_start(self, resumed: bool, changes: dict[str, tuple[Any, Any]]) -> None:
        """The resolved config, and one provenance line per start or resume (with the settings it changed)."""
        if not self.world.is_main:
            return
        self.run_dir.mkdir(parents=True, exist_ok=True)
        atomic_write_text(self.run_dir / "config.yaml", self.config.to_yaml())
        record = {**provenance(self.device), "precision": self.precision, "world_size": self.world.size,
                  "torch_threads": torch.get_num_threads(), "resumed": resumed}
        if changes:
            record["changed_settings"] = {key: [old, new] for key, (old, new) in changes.items()}
        with (self.run_dir / PROVENANCE_FILE).open("a") as handle:
            handle.write(json.dumps(record) + "\n")

    def _build_model_and_optimizer(self) -> None:
        tc = self.config.train
        torch.manual_seed(tc.seed)  # identical initial weights on every rank
        random.seed(tc.seed)
        self.model = Transformer(self.config.model).to(self.device)
        self.optimizer = build_optimizer(self.model, tc, self.device)
        self.total_steps = self._planned_steps()
        self.scheduler = build_scheduler(self.optimizer, tc, self.config.model.d_model, self.total_steps,
                                         elapsed_seconds=lambda: self.progress.elapsed_seconds)
        self.scaler = torch.amp.GradScaler(self.device.type, enabled=self.precision == "fp16")

    def _restore(self, checkpoint_dir: Path, state: dict) -> None:
        load_weights(self.model, checkpoint_dir / "model.safetensors", self.device)
        self.progress = Progress(**state["progress"])  # first: a schedule on the clock reads its elapsed time
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])  # restores the step count, keeps this run's schedule
        # Recompute the current lr from *this* run's schedule: identical when unchanged (bit-exact resume), and an
        # explicitly changed schedule (--set train.lr_factor=...) takes effect from the first resumed update.
        for group, base, schedule in zip(self.optimizer.param_groups, self.scheduler.base_lrs,
                                         self.scheduler.lr_lambdas):
            group["lr"] = base * schedule(self.scheduler.last_epoch)
        self.scaler.load_state_dict(state["scaler"])
        torch.set_rng_state(state["rng"]["torch"])
        if self.device.type == "cuda" and state["rng"].get("cuda") is not None:
            torch.cuda.set_rng_state(state["rng"]["cuda"][min(self.world.rank, len(state["rng"]["cuda"]) - 1)])
        random.setstate(_python_rng_from(state["rng"]["python"]))
        if self.world.is_main:
            print(f"resumed from {checkpoint_dir} at step {self.progress.step} (epoch {self.progress.epoch + 1}, "
                  f"update {self.progress.group_in_epoch} of the epoch)", file=sys.stderr)

    def _wrap_for_training(self) -> torch.nn.Module:
        """The module a training step calls: the model inside its loss, compiled and wrapped by DDP as asked."""
        tc = self.config.train
        all_positions = loss_over_all_positions(self.device, compiled=self.compile_options is not None)
        loss_model: torch.nn.Module = TranslationLoss(self.model, tc.label_smoothing, all_positions=all_positions)
        if self.compile_options is not None:
            if tc.length_buckets:  # one graph per batch shape: none may fall back to eager for want of room
                limit = recompile_limit(len(self.data.sampler.shapes()))
                torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, limit)
            loss_model = torch.compile(loss_model, **self.compile_options)
        if self.world.distributed:
            loss_model = DistributedDataParallel(
                loss_model, device_ids=[self.device.index] if self.device.type == "cuda" else None
            )
        return loss_model

    @property
    def steps_per_epoch(self) -> int:
        return math.ceil(self.data.batches_per_epoch / (self.config.train.grad_accum * self.world.size))

    def _planned_steps(self) -> int | None:
        tc = self.config.train
        candidates = [tc.max_steps] if tc.max_steps else []
        if tc.max_epochs:
            candidates.append(self.steps_per_epoch * tc.max_epochs)
        return min(candidates) if candidates else None

    # ---- the loop ----------------------------------------------------------------------------------------------
    def fit(self) -> dict[str, Any]:
        """Train until a limit (epochs, updates, minutes), early stopping or a stop signal; the last update is
        always evaluated and saved (a stopped run only saved). Returns the run's summary."""
        tc = self.config.train
        session_started = time.perf_counter()
        started = session_started - self.progress.elapsed_seconds
        # A run ended by the clock estimates its last update from the average pace (see _log_update), and the
        # bar's ETA must use the same pace (smoothing=0) to read as the time left.
        self._session_start = (self.progress.step, self.progress.elapsed_seconds)
        bar = tqdm(total=self.total_steps, initial=self.progress.step, unit="step", dynamic_ncols=True,
                   smoothing=0 if tc.max_minutes is not None else 0.3,
                   disable=not (tc.progress and self.world.is_main), file=sys.stderr)
        try:
            with self._stop_signals_end_the_run(), self._out_of_memory_named():
                stop = self._train(bar, started)
        finally:
            bar.close()
            if self.metrics is not None:
                self.metrics.close()
        if stop is Stop.INTERRUPTED:
            self._checkpoint("interrupt")
            if self.world.is_main:
                print(f"interrupted by {signal.Signals(self._stop_signal).name}: saved a checkpoint at step "
                      f"{self.progress.step}; continue with --resume", file=sys.stderr)
        summary = {"stop_reason": stop.value, "step": self.progress.step, "epoch": self.progress.epoch,
                   "best_metric": self.progress.best_metric, "skipped_updates": self.progress.skipped_updates,
                   "minutes": round((time.perf_counter() - started) / 60, 2), "world_size": self.world.size}
        # Model FLOPs utilisation over this session's whole wall time: compilation, evaluations and checkpoints
        # count as time in which the device did no training.
        mfu = self._mfu(self._session_flops / max(time.perf_counter() - session_started, 1e-9))
        if mfu is not None:
            summary["mfu"] = float(f"{mfu:.4g}")
        if stop is Stop.INTERRUPTED:
            summary["signal"] = signal.Signals(self._stop_signal).name
        if self.world.distributed:
            summary["ranks_identical"] = self._ranks_identical()
        shutdown(self.world)
        return summary

    def _train(self, bar: tqdm, started: float) -> Stop:
        """Epochs of updates. After each update: read the results of the updates not read yet (after every update,
        or only where one is logged, saved or evaluated: ``self.defer_reads``), log it, save it when a periodic
        save is due, evaluate (and save) when an evaluation is due or the run is about to stop, then stop if a
        limit was reached."""
        tc = self.config.train
        self._log_window.restart()
        while tc.max_epochs is None or self.progress.epoch < tc.max_epochs:
            groups = self._groups(self.progress.epoch)
            first = self.progress.group_in_epoch
            # this rank's micro-batches for the rest of the epoch, each sent to the device while the one before it
            # computes
            batches = self.data.loader((b for group in groups[first:] for b in self._share(group)[0]), self.device)
            for group_index in range(first, len(groups)):
                if self._stop_signal is not None:
                    return Stop.INTERRUPTED
                if tc.max_steps is not None and self.progress.step >= tc.max_steps:  # resumed after its last update
                    return Stop.MAX_STEPS
                step_before = self.progress.step
                self.update(groups[group_index], batches)
                counted = self.progress.step > step_before  # a skipped update is not (when known at once)
                self.progress.elapsed_seconds = time.perf_counter() - started
                end_of_epoch = group_index + 1 == len(groups)
                self.progress.group_in_epoch = 0 if end_of_epoch else group_index + 1
                self.progress.epoch += end_of_epoch
                stop = self._limit_reached()
                log_due = counted and self.progress.step % tc.log_every_steps == 0
                save_due = counted and bool(tc.save_every_steps) and self.progress.step % tc.save_every_steps == 0
                evaluation_due = self._evaluation_due(counted, end_of_epoch, stopping=stop is not None)
                if not self.defer_reads or log_due or save_due or evaluation_due or stop is not None:
                    self._read_updates()  # with deferred reads, the only places the host waits for the device
                if counted:
                    bar.update(1)
                if log_due:
                    self._log_update(bar)
                if save_due:
                    with self._log_window.paused():
                        self._checkpoint("periodic")
                if evaluation_due:
                    with self._log_window.paused():
                        patience_spent = self._evaluate_and_checkpoint()
                    if stop is None and patience_spent:
                        stop = Stop.EARLY_STOP
                if stop is not None:
                    return stop
        return Stop.MAX_EPOCHS  # a run resumed after its last epoch: nothing left to do

    def _limit_reached(self) -> Stop | None:
        tc = self.config.train
        if tc.max_steps is not None and self.progress.step >= tc.max_steps:
            return Stop.MAX_STEPS
        if tc.max_minutes is not None and self.progress.elapsed_seconds >= 60 * tc.max_minutes:
            return Stop.MAX_MINUTES
        if tc.max_epochs is not None and self.progress.epoch >= tc.max_epochs:
            return Stop.MAX_EPOCHS
        return None

    def _evaluation_due(self, counted: bool, end_of_epoch: bool, stopping: bool) -> bool:
        """Every ``eval_every_steps`` updates, else at the end of every epoch; and always for the last weights of a
        run that is about to stop, unless they are already saved."""
        if stopping and self.checkpointed_step != self.progress.step:
            return True
        every = self.config.train.eval_every_steps
        if every:
            return counted and self.progress.step % every == 0
        return end_of_epoch

    def _groups(self, epoch: int) -> list[list[list[int]]]:
        """The epoch's updates: each a list of micro-batches (lists of example indices) for every rank."""
        batches = self.data.epoch_batches(epoch)
        size = self.config.train.grad_accum * self.world.size
        return [batches[i : i + size] for i in range(0, len(batches), size)]

    def _share(self, group: list[list[int]]) -> tuple[list[list[int]], list[float]]:
        """This rank's micro-batches of an update and their weights. The last group of an epoch may be short: a
        rank without a batch of its own still runs the collective backward passes, on the group's first batch with
        weight 0."""
        accum, rank = self.config.train.grad_accum, self.world.rank
        mine = group[rank * accum : (rank + 1) * accum]
        weights = [1.0] * len(mine) + [0.0] * (accum - len(mine))
        return mine + [group[0]] * (accum - len(mine)), weights

    def update(self, group: list[list[int]], batches: Iterator[Batch]) -> StepResult | DeferredStepResult:
        """One optimizer update over a group of batches (this rank's share of it, taken from ``batches``). Read
        at once, a non-finite update is skipped and not counted; with deferred reads every update counts, and a
        skipped one is accounted for when it is read (:meth:`_read_updates`)."""
        for callback in self.callbacks:
            callback.on_update_start(self)
        tc = self.config.train
        micro_batches, weights = self._share(group)
        number = self.progress.step + 1
        result = train_step(
            self.loss_model, self.optimizer, itertools.islice(batches, len(micro_batches)),
            tokens=sum(self.data.target_tokens(b) for b in group), precision=self.precision,
            clip_grad_norm=tc.clip_grad_norm, scaler=self.scaler, scheduler=self.scheduler, weights=weights,
            world=self.world, defer_reads=self.defer_reads,
        )
        if isinstance(result, DeferredStepResult) or result.finite:
            self.progress.step += 1
        self._unread.append((number, result, self._group_flops(group)))
        for callback in self.callbacks:
            callback.on_update_end(self, result)
        return result

    def _read_updates(self) -> None:
        """Bring the results of the updates not read yet to the host (one wait for the device) and account for
        them in order: tokens and FLOPs for the rates, and each skipped update, which stops the run after
        ``train.max_consecutive_nonfinite`` in a row."""
        if not self._unread:
            return
        numbers, results, flops = zip(*self._unread)
        self._unread = []
        if self.defer_reads:
            results = read_results(results)
        for number, result, update_flops in zip(numbers, results, flops):
            self._log_window.add(result, update_flops)
            self._last_result = result
            if result.finite:
                self.progress.consecutive_nonfinite = 0
                self._session_flops += update_flops
            else:
                self._skip_nonfinite(result.loss_sum, number)

    def _skip_nonfinite(self, loss: float, number: int) -> None:
        self.progress.consecutive_nonfinite += 1
        self.progress.skipped_updates += 1
        if self.metrics is not None:
            self.metrics.write("nonfinite", number - 1, loss=loss if math.isfinite(loss) else str(loss),
                               consecutive=self.progress.consecutive_nonfinite)
        if self.world.is_main:
            print(f"step {number}: non-finite loss/gradient ({loss}); update skipped "
                  f"({self.progress.consecutive_nonfinite} in a row)", file=sys.stderr)
        if self.progress.consecutive_nonfinite >= self.config.train.max_consecutive_nonfinite:
            last = self.run_dir / "checkpoints" / "last"
            raise VaswaniError(
                f"stopping: {self.progress.consecutive_nonfinite} consecutive non-finite losses at step {number}. "
                f"The last good checkpoint is {last.resolve() if last.exists() else 'not written yet'}; "
                "lower the learning rate (train.lr_factor / train.lr) or use bf16/fp32, then --resume"
            )

    # ---- stop signals and memory -------------------------------------------------------------------------------
    @contextlib.contextmanager
    def _stop_signals_end_the_run(self) -> Iterator[None]:
        """SIGINT and SIGTERM let the update in flight finish, then the loop stops and saves; a second one gives
        up at once."""

        def request_stop(signum: int, frame: Any) -> None:
            if self._stop_signal is not None:
                raise KeyboardInterrupt
            self._stop_signal = signum

        previous = {signum: signal.signal(signum, request_stop) for signum in STOP_SIGNALS}
        try:
            yield
        finally:
            for signum, handler in previous.items():
                signal.signal(signum, handler)

    @contextlib.contextmanager
    def _out_of_memory_named(self) -> Iterator[None]:
        """An allocation that fails during training names the settings that size it."""
        try:
            yield
        except (MemoryError, RuntimeError) as error:
            if not is_out_of_memory(error):
                raise
            tc = self.config.train
            where = "GPU" if self.device.type == "cuda" else "host"
            raise EnvironmentFault(
                f"out of {where} memory with train.max_tokens={tc.max_tokens}, train.grad_accum={tc.grad_accum}, "
                f"data.max_len={self.config.data.max_len}, model d_model={self.config.model.d_model}; lower "
                "train.max_tokens (and raise train.grad_accum to keep the same tokens per update)"
            ) from None

    # ---- logging, evaluation, checkpoints ----------------------------------------------------------------------
    def _group_flops(self, group: list[list[int]]) -> float:
        """Model FLOPs of one update (every rank's batches), for MFU; counted only where MFU is logged."""
        if self.device.type != "cuda":
            return 0.0
        return sum(training_flops(self.config.model, *self.data.flop_shape(b)) for b in group)

    def _log_update(self, bar: tqdm) -> None:
        """The newest update's loss, accuracy, rate and gradient norm, and the rates since the last log line."""
        result, window = self._last_result, self._log_window
        tokens_per_second, flops_per_second = window.rates()
        lr = self.optimizer.param_groups[0]["lr"]
        record = {"epoch": round(self.progress.step / max(self.steps_per_epoch, 1), 3),
                  "loss": round(result.loss, 5), "nll": round(result.nll, 5), "accuracy": round(result.accuracy, 5),
                  "lr": lr, "grad_norm": round(result.grad_norm, 4), "tokens_per_s": round(tokens_per_second, 1),
                  "elapsed_s": round(self.progress.elapsed_seconds, 1)}
        mfu = self._mfu(flops_per_second)
        if mfu is not None:
            record["mfu"] = float(f"{mfu:.4g}")  # significant digits: a small model's MFU is far below 1e-4
        bar.set_postfix(loss=f"{result.loss:.3f}", lr=f"{lr:.2e}", tok_s=f"{tokens_per_second:,.0f}",
                        **({"mfu": f"{mfu:.1%}"} if mfu is not None else {}))
        if self.config.train.max_minutes is not None and not bar.disable:
            # The clock usually ends such a run long before its planned updates: size the bar to the updates the
            # time left allows at this session's average pace (evaluations included), so its ETA is the run's.
            start_step, start_seconds = self._session_start
            seconds = self.progress.elapsed_seconds - start_seconds
            pace = (self.progress.step - start_step) / seconds if seconds > 0 else None
            seconds_left = 60 * self.config.train.max_minutes - self.progress.elapsed_seconds
            bar.total = updates_within_budget(self.progress.step, self.total_steps, seconds_left, pace)
            bar.refresh()
        if self.metrics is not None:
            self.metrics.write("train", self.progress.step, **record)
        window.restart()

    def _mfu(self, flops_per_second: float) -> float | None:
        """Model FLOPs utilisation since the last log line, against the device's peak (GPU only: a CPU's peak
        depends on what else runs on it)."""
        if self.device.type != "cuda":
            return None
        if self._peak is None:
            self._peak = peak_flops(self.device, self.precision)
        return flops_per_second / self._peak[0]

    def _evaluate_and_checkpoint(self) -> bool:
        """Validate, track the best metric, save a checkpoint; True when early stopping's patience is spent."""
        from vaswani.training.scoring import validate

        tc = self.config.train
        for callback in self.callbacks:
            callback.on_evaluation_start(self)
        result = validate(self.model, self.data, self.device, self.precision,
                          bleu_subset=tc.bleu_subset, label_smoothing=tc.label_smoothing)
        for callback in self.callbacks:
            callback.on_evaluation(self, result)
        epoch = round(self.progress.step / max(self.steps_per_epoch, 1), 3)
        metric = result["loss"] if tc.early_stopping_metric == "val_loss" else -(result.get("bleu") or 0.0)
        improved = self.progress.best_metric is None or metric < self.progress.best_metric
        if improved:
            self.progress.best_metric = metric
            self.progress.evals_without_improvement = 0
        else:
            self.progress.evals_without_improvement += 1
        if self.metrics is not None:
            self.metrics.write("valid", self.progress.step, epoch=epoch, **result, improved=improved)
            message = (f"step {self.progress.step} epoch {epoch:g}: "
                       f"val loss {result['loss']:.4f} (nll {result['nll']:.4f}, ppl {math.exp(result['nll']):.2f})")
            if result.get("bleu") is not None:
                message += f", greedy BLEU {result['bleu']:.2f} on {result['bleu_sentences']} sentences"
            print(message + (" *" if improved else ""), file=sys.stderr)
        self._checkpoint("best" if improved else "eval")
        if self.world.is_main:
            plot_run(self.run_dir)
        patience_spent = tc.patience is not None and self.progress.evals_without_improvement >= tc.patience
        if patience_spent and self.world.is_main:
            print(f"early stopping: no improvement of {tc.early_stopping_metric} for {tc.patience} evaluations",
                  file=sys.stderr)
        return patience_spent

    def _checkpoint(self, reason: str) -> None:
        """Write a checkpoint of the current step (the main rank writes, every rank waits for it)."""
        self._read_updates()  # the saved progress counts every skipped update
        for callback in self.callbacks:
            callback.on_checkpoint_start(self, reason)
        if self.world.is_main:
            self._write_checkpoint(reason)
        self.world.barrier()
        self.checkpointed_step = self.progress.step
        for callback in self.callbacks:
            callback.on_checkpoint_end(self, reason)

    def _write_checkpoint(self, reason: str) -> None:
        checkpoints = self.run_dir / "checkpoints"
        state = {
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict(),
            "scaler": self.scaler.state_dict(),
            "progress": dataclasses.asdict(self.progress),
            "rng": {"torch": torch.get_rng_state(),
                    "cuda": torch.cuda.get_rng_state_all() if self.device.type == "cuda" else None,
                    "python": _python_rng_to_list(random.getstate())},
            "config_yaml": self.config.to_yaml(),
        }
        meta = {"step": self.progress.step, "epoch": self.progress.epoch, "reason": reason,
                "best_metric": self.progress.best_metric}
        directory = save_checkpoint(checkpoints, f"step_{self.progress.step:07d}", self.model,
                                    self.data.tokenizer_file, state, meta)
        point(checkpoints, "last", directory)
        if reason == "best":
            point(checkpoints, "best", directory)
        prune(checkpoints, self.config.train.keep_checkpoints)

    def _ranks_identical(self) -> bool:
        """Do all ranks hold the same parameters? Compares per-tensor checksums by all-reducing their min and max."""
        import torch.distributed as dist

        sums = torch.stack([torch.stack([p.detach().double().sum(), p.detach().double().square().sum()])
                            for p in self.model.parameters()]).flatten().to(collective_device())
        low, high = sums.clone(), sums.clone()
        dist.all_reduce(low, op=dist.ReduceOp.MIN)
        dist.all_reduce(high, op=dist.ReduceOp.MAX)
        return bool(torch.equal(low, high))


class _LogWindow:
    """Tokens, model FLOPs and training time since the last log line: the rates a log line reports (evaluations
    and checkpoint writes are not training time)."""

    def __init__(self) -> None:
        self.restart()

    def restart(self) -> None:
        self.tokens, self.flops, self.started = 0, 0.0, time.perf_counter()

    def add(self, result: StepResult, flops: float) -> None:
        self.tokens += result.tokens
        self.flops += flops if result.finite else 0.0

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        paused_at = time.perf_counter()
        try:
            yield
        finally:
            self.started += time.perf_counter() - paused_at

    def rates(self) -> tuple[float, float]:
        """(tokens/s, model FLOP/s)."""
        seconds = max(time.perf_counter() - self.started, 1e-9)
        return self.tokens / seconds, self.flops / seconds


def resumed_config(run_dir: str | Path, settings: Sequence[str] = ()) -> RunConfig:
    """The config a resumed run continues with: the one saved in its latest checkpoint, changed only by the
    ``section.key=value`` settings given now (what ``vaswani train --resume --set ...`` passes)."""
    if latest_checkpoint(Path(run_dir) / "checkpoints") is None:
        check_start(Path(run_dir), resume=True, start_over=False)  # names what the directory holds instead
    checkpoint_dir, state = load_trainer_state(run_dir)
    return apply_settings(_config_of(checkpoint_dir, state), list(settings))


def train(config: RunConfig, run_dir: str | Path, resume: bool = False, start_over: bool = False,
          callbacks: Sequence[Callback] = ()) -> dict[str, Any] | None:
    """Train a new run in ``run_dir`` (or continue it with ``resume``), choose its final model when
    ``train.final_model`` is set (see training/finalize.py), and write its ``summary.json``: what ``vaswani train``
    does. The directory is locked for the whole run, and a start that would mix two runs is
    refused (``start_over`` moves the earlier run aside). Returns the summary on the main process (None on the
    other ranks)."""
    started = time.perf_counter()
    run_dir = Path(run_dir)
    is_main = int(os.environ.get("RANK", "0")) == 0  # under torchrun, rank 0 owns the directory
    with claim(run_dir) if is_main else contextlib.nullcontext():
        if is_main:
            check_start(run_dir, resume=resume, start_over=start_over)
        trainer = Trainer(config, run_dir, resume=resume, callbacks=callbacks)
        summary = trainer.fit()
        if not trainer.world.is_main:
            return None
        if trainer.config.train.final_model and summary["stop_reason"] != Stop.INTERRUPTED.value:
            from vaswani.training.finalize import finalize, summarize

            finalizing = time.perf_counter()
            summary["final"] = summarize(finalize(run_dir, trainer.config, trainer.device, trainer.precision))
            summary["final_minutes"] = round((time.perf_counter() - finalizing) / 60, 2)
        # what the user waited for: data preparation, training and the final model (not Python's start-up)
        summary["wall_minutes"] = round((time.perf_counter() - started) / 60, 2)
        atomic_write_json(run_dir / "summary.json", summary)
        return summary


def updates_within_budget(step: int, planned: int | None, seconds_left: float,
                          updates_per_second: float | None) -> int | None:
    """The update a wall-clock budget is expected to end at, at the current pace; never past the planned
    number of updates, never before the current one. Without a pace yet, the plan."""
    if not updates_per_second:
        return planned
    reachable = step + int(max(seconds_left, 0.0) * updates_per_second)
    return max(step, reachable if planned is None else min(planned, reachable))


def _config_of(checkpoint_dir: Path, state: dict) -> RunConfig:
    import yaml

    return RunConfig.from_dict(yaml.safe_load(state["config_yaml"]), source=f"{checkpoint_dir}/trainer_state.pt")


def _without_data_dir(data: Any) -> Any:
    """Data settings that define the corpus (where its files lie may change between machines)."""
    return dataclasses.replace(data, data_dir=None)


def _python_rng_to_list(state: tuple) -> list:
    return [state[0], list(state[1]), state[2]]


def _python_rng_from(state: list) -> tuple:
    return (state[0], tuple(state[1]), state[2])
