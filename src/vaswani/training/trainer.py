"""The training loop: epochs of updates, evaluating and saving on the way, resumable bit for bit.

    config, data = settle(config, run_dir)         # the data; the config with its vocabulary, frozen (training/data.py)
    trainer = Trainer(config, run_dir, data=data)  # device, model, optimizer (or a resumed run's state); writes nothing
    summary = trainer.fit()                        # updates until a limit, evaluating and saving on the way

One *update* consumes a *group* of G = grad_accum × world_size consecutive batches of the epoch's deterministic
batch list; rank r takes batches r·accum … r·accum+accum-1 of the group. Every rank therefore knows every batch
of the group, so the loss can be normalised by the group's real target tokens without communication, and a run
on N ranks computes the same update as one process with grad_accum × N.

What the run reports (throughput and MFU, the progress bar, metrics and plots, printed lines) are callbacks
(training/callbacks.py); what a checkpoint holds to continue is training/resume.py; what ``vaswani train`` does
around the loop (the directory's lock, the final model, summary.json) is training/run.py.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import random
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, Sequence

import torch

from vaswani.data.batching import Batch
from vaswani.devices import device_type, resolve_device
from vaswani.errors import VaswaniError
from vaswani.evaluation.checkpoint_info import CheckpointMeta, ValidationResult
from vaswani.precision import resolve_precision
from vaswani.training import data as training_data
from vaswani.training import device_choices as choices
from vaswani.training.callbacks import Callback, LogLine, ReadUpdate, reporting
from vaswani.training.checkpoint import point_link_at, prune, save_checkpoint
from vaswani.training.config import RunConfig
from vaswani.training.data import TrainingData
from vaswani.training.distributed import World, init_world, rank_batches, ranks_identical, shutdown
from vaswani.training.optim import build_optimizer
from vaswani.training.parent import initial_model
from vaswani.training.resume import Progress, check_resumable, read_resume_state, record_start, restore, trainer_state
from vaswani.training.schedule import build_scheduler, early_stopping_counts, planned_steps
from vaswani.training.scoring import validate
from vaswani.training.signals import StopSignals
from vaswani.training.step import DeferredStepResult, StepResult, read_results, train_step
from vaswani.training.summary import RunSummary, Stop, limit_reached


class Trainer:
    """One training run in ``run_dir`` of a config settled with its data's vocabulary (another one is refused):
    :func:`~vaswani.training.data.settle` gives both; without ``data`` the Trainer loads the config's.
    ``resume=True`` continues the run from its latest checkpoint with ``config`` (build it with
    :func:`~vaswani.training.resume.resumed_config` so the run keeps its own settings); the model and data settings
    must be the run's, training settings may change, and each change is printed and recorded in the run's
    provenance. Nothing is written until :meth:`fit`."""

    def __init__(self, config: RunConfig, run_dir: str | Path, resume: bool = False, world: World | None = None,
                 callbacks: Sequence[Callback] = (), data: TrainingData | None = None):
        self.run_dir, self.config, training = Path(run_dir), config, config.train
        self.world = world or init_world(device_type(training.device))
        self.device = resolve_device(training.device, self.world.local_rank)
        choices.set_up_process(training, self.device)
        self.precision = resolve_precision(training.precision, self.device)
        # Device-dependent choices (training/device_choices.py) come before any work: a refusal then costs nothing
        self.defer_reads = choices.defers_host_reads(training.host_sync, self.device)
        self.compile_options = choices.compile_options(training.compile, training.cuda_graphs, self.device,
                                                       bool(training.length_buckets))
        saved = read_resume_state(self.run_dir) if resume else None
        self.resumed_from = saved.checkpoint_dir if saved is not None else None
        self.changed_settings = check_resumable(config, saved, announce=self.world.is_main) if saved else {}
        self.data = data or training_data.load(config, self.run_dir, self.world, resuming=resume)
        training_data.check_vocabulary(config, self.data)
        self.config = config = config.settled()
        torch.manual_seed(training.seed)  # identical initial weights on every rank
        random.seed(training.seed)
        self.progress = Progress()
        self.model = initial_model(config.model, self.data.parent, training.freeze, self.device)
        self.optimizer = build_optimizer(self.model, training, self.device)
        self.total_steps = planned_steps(training, self.steps_per_epoch)
        self.scheduler = build_scheduler(self.optimizer, training, config.model.d_model, self.total_steps,
                                         elapsed_seconds=lambda: self.progress.elapsed_seconds)
        self.scaler = torch.amp.GradScaler(self.device.type, enabled=self.precision == "fp16")
        if saved is not None:
            self.progress = dataclasses.replace(saved.progress)  # first: a schedule on the clock reads its time
            restore(saved, self.model, self.optimizer, self.scheduler, self.scaler, self.device, self.world.rank)
        # The step of the newest checkpoint this process knows of: a resumed run starts at its checkpoint's.
        self.checkpointed_step: int | None = self.progress.step if saved is not None else None
        if self.world.rank > 0:  # dropout masks differ per rank, as they would across one process's micro-batches
            torch.manual_seed(training.seed + 1000 * self.world.rank + self.progress.step)
        self.loss_model = choices.training_module(self.model, training, self.device, self.compile_options,
                                                  self.world.distributed, batch_shapes=len(self.data.sampler.shapes())
                                                  if training.length_buckets else 0)
        self.callbacks = [*(reporting(training.progress) if self.world.is_main else []), *callbacks]
        self.signals = StopSignals()
        # Updates whose results the host has not read yet: with deferred reads they wait for a log step, an
        # evaluation, a checkpoint or the end.
        self._unread: list[tuple[int, list[list[int]], StepResult | DeferredStepResult]] = []
        self._last_read: StepResult | None = None
        self._validated: tuple[int, ValidationResult] | None = None  # the newest validation and its step

    @property
    def steps_per_epoch(self) -> int:
        return math.ceil(self.data.batches_per_epoch / (self.config.train.grad_accum * self.world.size))

    def epochs_done(self) -> float:
        return round(self.progress.step / max(self.steps_per_epoch, 1), 3)

    # ---- the loop ----------------------------------------------------------------------------------------------
    def fit(self) -> RunSummary:
        """Train until a limit (epochs, updates, minutes), early stopping or a stop signal; the last update is
        always evaluated and saved (a stopped run only saved). Returns the run's summary."""
        if self.world.is_main:
            record_start(self.run_dir, self.config, self.device, self.precision, self.world.size,
                         resumed=self.resumed_from is not None, changes=self.changed_settings,
                         parent=self.data.parent)
            self.data.record_run_files(self.run_dir)
        started = time.perf_counter() - self.progress.elapsed_seconds
        summary = None
        self._notify("on_fit_start")
        try:
            with self.signals.caught(), choices.CompilationWatch() as compilation:
                stop = self._train(started)
                if stop is Stop.INTERRUPTED:
                    self._checkpoint("interrupt")
            summary = RunSummary(
                stop, self.progress.step, self.progress.epoch, self.progress.best_metric,
                self.progress.skipped_updates, round((time.perf_counter() - started) / 60, 2), self.world.size,
                signal=self.signals.name if stop is Stop.INTERRUPTED else None,
                ranks_identical=ranks_identical(self.model) if self.world.distributed else None,
                compilation=compilation.counts() if self.compile_options is not None else None)
        finally:
            self._notify("on_fit_end", summary)
        shutdown(self.world)
        return summary

    def _train(self, started: float) -> Stop:
        """Epochs of updates. After each: read the results not read yet (after every update, or only where one is
        logged, saved or evaluated: ``self.defer_reads``), log, save when a periodic save is due, evaluate (and
        save) when an evaluation is due or the run is about to stop, then stop if a limit was reached."""
        training, progress = self.config.train, self.progress
        while training.max_epochs is None or progress.epoch < training.max_epochs:
            groups, first = self.epoch_updates(progress.epoch), progress.group_in_epoch
            if first >= len(groups):  # resumed with larger batches (--set train.max_tokens): this epoch is done
                progress.epoch, progress.group_in_epoch = progress.epoch + 1, 0
                continue
            batches = self.device_batches(groups[first:])
            for index in range(first, len(groups)):
                if self.signals.received is not None:
                    return Stop.INTERRUPTED
                if training.max_steps is not None and progress.step >= training.max_steps:  # resumed past its end
                    return Stop.MAX_STEPS
                step_before = progress.step
                self.update(groups[index], batches)
                counted = progress.step > step_before  # a skipped update is not (when known at once)
                progress.elapsed_seconds = time.perf_counter() - started
                end_of_epoch = index + 1 == len(groups)
                progress.group_in_epoch = 0 if end_of_epoch else index + 1
                progress.epoch += end_of_epoch
                stop = limit_reached(training, progress)
                log_due = counted and progress.step % training.log_every_steps == 0
                save_due = counted and bool(training.save_every_steps) and not progress.step % training.save_every_steps
                evaluation_due = self._evaluation_due(counted, end_of_epoch, stopping=stop is not None)
                if not self.defer_reads or log_due or save_due or evaluation_due or stop is not None:
                    self._read_updates()  # with deferred reads, the only places the host waits for the device
                if log_due:
                    self._log()
                if save_due:
                    self._checkpoint("periodic")
                if evaluation_due and self._evaluate_and_checkpoint() and stop is None:
                    stop = Stop.EARLY_STOP
                if stop is not None:
                    return stop
        return Stop.MAX_EPOCHS  # a run resumed after its last epoch: nothing left to do

    def _evaluation_due(self, counted: bool, end_of_epoch: bool, stopping: bool) -> bool:
        """Every ``eval_every_steps`` updates, else at the end of every epoch; and always for the last weights of a
        run that is about to stop, unless they are already saved."""
        if stopping and self.checkpointed_step != self.progress.step:
            return True
        every = self.config.train.eval_every_steps
        if every:
            return counted and self.progress.step % every == 0
        return end_of_epoch

    def epoch_updates(self, epoch: int) -> list[list[list[int]]]:
        """The epoch's updates: each a group of micro-batches (lists of example indices) of every rank."""
        batches = self.data.epoch_batches(epoch)
        size = self.config.train.grad_accum * self.world.size
        return [batches[i : i + size] for i in range(0, len(batches), size)]

    def device_batches(self, groups: Iterable[list[list[int]]]) -> Iterator[Batch]:
        """This rank's micro-batches of these updates, each sent to the device while the one before it computes."""
        own = (b for group in groups for b in rank_batches(group, self.config.train.grad_accum, self.world.rank)[0])
        return self.data.loader(own, self.device)

    def update(self, group: list[list[int]], batches: Iterator[Batch]) -> StepResult | DeferredStepResult:
        """One optimizer update over a group of batches (this rank's share of it, taken from ``batches``). Read
        at once, a non-finite update is skipped and not counted; with deferred reads every update counts, and a
        skipped one is accounted for when it is read (:meth:`_read_updates`)."""
        self._notify("on_update_start")
        result = self._step(group, batches)
        self._unread.append((self.progress.step + 1, group, result))
        if isinstance(result, DeferredStepResult) or result.finite:
            self.progress.step += 1
        self._notify("on_update_end", result)
        return result

    def unrecorded_updates(self) -> Iterator[int]:
        """The first epoch's updates over and over, neither counted, reported nor saved, each yielding its target
        tokens: how training/budget.py times a model on this machine, in a Trainer of its own."""
        groups = self.epoch_updates(0)
        batches = self.device_batches(itertools.cycle(groups))
        for group in itertools.cycle(groups):
            self._step(group, batches)
            yield sum(self.data.target_tokens(b) for b in group)

    def _step(self, group: list[list[int]], batches: Iterator[Batch]) -> StepResult | DeferredStepResult:
        training = self.config.train
        micro_batches, weights = rank_batches(group, training.grad_accum, self.world.rank)
        return train_step(
            self.loss_model, self.optimizer, itertools.islice(batches, len(micro_batches)),
            tokens=sum(self.data.target_tokens(b) for b in group), precision=self.precision,
            clip_grad_norm=training.clip_grad_norm, scaler=self.scaler, scheduler=self.scheduler, weights=weights,
            world=self.world, defer_reads=self.defer_reads,
        )

    def _read_updates(self) -> None:
        """Bring the results of the updates not read yet to the host (one wait for the device) and count them in
        order; ``train.max_consecutive_nonfinite`` skipped updates in a row stop the run."""
        unread, self._unread = self._unread, []
        taken = [result for _, _, result in unread]
        for (number, group, _), result in zip(unread, read_results(taken) if self.defer_reads else taken):
            self._last_read = result
            self.progress.consecutive_nonfinite = 0 if result.finite else self.progress.consecutive_nonfinite + 1
            self.progress.skipped_updates += not result.finite
            self._notify("on_update_read", ReadUpdate(number, group, result))
            if self.progress.consecutive_nonfinite >= self.config.train.max_consecutive_nonfinite:
                last = self.run_dir / "checkpoints" / "last"
                raise VaswaniError(
                    f"stopping: {self.progress.consecutive_nonfinite} consecutive non-finite losses at step "
                    f"{number}. The last good checkpoint is {last.resolve() if last.exists() else 'not written yet'}"
                    "; lower the learning rate (train.lr_factor / train.lr) or use bf16/fp32, then `resume`")

    def _log(self) -> None:
        """The newest update's loss, accuracy and gradient norm, and the learning rate of the next."""
        result = self._last_read
        self._notify("on_log", LogLine(
            self.progress.step, self.epochs_done(), round(result.loss, 5), round(result.nll, 5),
            round(result.accuracy, 5), self.optimizer.param_groups[0]["lr"], round(result.grad_norm, 4),
            elapsed_s=round(self.progress.elapsed_seconds, 1)))

    def _evaluate_and_checkpoint(self) -> bool:
        """Validate, count it for early stopping, save a checkpoint; True when early stopping's patience is spent."""
        training, progress = self.config.train, self.progress
        self._notify("on_evaluation_start")
        result = validate(self.model, self.data, self.device, self.precision, bleu_subset=training.bleu_subset,
                          label_smoothing=training.label_smoothing)
        metric = result.loss if training.early_stopping_metric == "val_loss" else -(result.bleu or 0.0)
        improved = progress.best_metric is None or metric < progress.best_metric
        progress.best_metric = metric if improved else progress.best_metric
        # a clock-driven rate that is still high stalls the metric without the model being done (training/schedule.py)
        counts = early_stopping_counts(training.decay_on_clock, self.optimizer.param_groups[0]["lr"], training.lr)
        progress.evals_without_improvement = 0 if improved else progress.evals_without_improvement + counts
        self._validated = (progress.step, result)
        self._notify("on_evaluation", result)
        self._checkpoint("best" if improved else "eval")
        return training.patience is not None and progress.evals_without_improvement >= training.patience

    def _checkpoint(self, reason: str) -> None:
        """Write a checkpoint of the current step: the main rank writes, every rank waits for it, and a stop signal
        that arrives meanwhile waits for it too (training/signals.py)."""
        self._read_updates()  # the saved progress counts every skipped update
        with self.signals.protecting_a_save():
            self._notify("on_checkpoint_start", reason)
            if self.world.is_main:
                step, validated = self.progress.step, self._validated
                meta = CheckpointMeta(step, self.progress.epoch, reason, self.progress.best_metric,
                                      validated[1] if validated is not None and validated[0] == step else None)
                state = trainer_state(self.progress, self.optimizer, self.scheduler, self.scaler, self.config,
                                      self.device)
                checkpoints = self.run_dir / "checkpoints"
                directory = save_checkpoint(checkpoints, f"step_{step:07d}", self.model, self.data.tokenizer_file,
                                            state, meta)
                point_link_at(checkpoints, "last", directory)
                if reason == "best":
                    point_link_at(checkpoints, "best", directory)
                prune(checkpoints, self.config.train.keep_checkpoints, around_best=self.config.train.average_last)
            self.world.barrier()
            self.checkpointed_step = self.progress.step
            self._notify("on_checkpoint_end", reason)

    def _notify(self, hook: str, *args: Any) -> None:
        for callback in self.callbacks:
            getattr(callback, hook)(self, *args)

