"""What a run reports, as callbacks on the Trainer's hook list: the throughput and MFU, the progress bar, the
metrics log with its plots, and the lines printed on stderr. ``Trainer(callbacks=[...])`` adds a user's own (a study
times every update with ``on_update_start``/``on_update_end``, the fault loop marks each phase).

The Trainer calls every callback's hook in list order, the reporting ones first (on the main rank only); a
callback observes the run and never changes it, except that :class:`Throughput` fills in its rates on the
:class:`LogLine` and the summary before the ones after it show and write them.
"""

from __future__ import annotations

import math
import sys
import time
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

from vaswani.evaluation.checkpoint_info import ValidationResult
from vaswani.progress import progress_reporter
from vaswani.records import to_json
from vaswani.training.flops import peak_flops, training_flops
from vaswani.training.metrics import MetricsLog, plot_run
from vaswani.training.step import DeferredStepResult, StepResult
from vaswani.training.summary import RunSummary, Stop

if TYPE_CHECKING:
    from vaswani.training.trainer import Trainer


@dataclass
class ReadUpdate:
    """An update whose result the host has read: at once, or with deferred reads at the next log step, evaluation,
    checkpoint or the end."""

    number: int  # the run's update count when it was taken (a skipped update leaves the count where it was)
    group: list[list[int]]  # every rank's micro-batches of it (example indices)
    result: StepResult


@dataclass
class LogLine:
    """A log step (a "train" record of metrics.jsonl): the newest update's values, and the rates since the last
    log line."""

    step: int
    epoch: float  # epochs of updates done, fractional
    loss: float  # label-smoothed, per target token
    nll: float
    accuracy: float
    lr: float  # the learning rate of the next update
    grad_norm: float  # before clipping
    tokens_per_s: float | None = None  # target tokens per second of training (filled in by Throughput)
    elapsed_s: float = 0.0  # the run's training time
    mfu: float | None = None  # model FLOPs utilisation (GPU; filled in by Throughput)


class Callback:
    """Observes a run without changing it: override the hooks you need."""

    def on_fit_start(self, trainer: Trainer) -> None:
        """When ``fit`` starts, after the run directory has its config and provenance."""

    def on_update_start(self, trainer: Trainer) -> None:
        """Before the micro-batches of an update are taken (each was collated while the update before it ran)."""

    def on_update_end(self, trainer: Trainer, result: StepResult | DeferredStepResult) -> None:
        """After the optimizer step (or the skip of a non-finite update); with deferred host reads the result's
        values are still on the device (training/step.py)."""

    def on_update_read(self, trainer: Trainer, update: ReadUpdate) -> None:
        """When the host has read an update's result and counted it (a skipped one in ``trainer.progress``)."""

    def on_log(self, trainer: Trainer, line: LogLine) -> None:
        """Every ``train.log_every_steps`` updates."""

    def on_evaluation_start(self, trainer: Trainer) -> None:
        """Before a validation pass."""

    def on_evaluation(self, trainer: Trainer, result: ValidationResult) -> None:
        """After a validation pass and its count for early stopping, before its checkpoint is written."""

    def on_checkpoint_start(self, trainer: Trainer, reason: str) -> None:
        """Before a checkpoint is written (reason: best, eval, periodic, interrupt)."""

    def on_checkpoint_end(self, trainer: Trainer, reason: str) -> None:
        """After the checkpoint is complete and ``last`` points at it."""

    def on_fit_end(self, trainer: Trainer, summary: RunSummary | None) -> None:
        """When ``fit`` ends: with its summary, or None when it ends with an error (which follows)."""


class Throughput(Callback):
    """Target tokens per second of training time since the last log line and, on a GPU, model FLOPs utilisation
    (MFU) against the device's peak; and the MFU over the session's whole wall time in the summary. Evaluations and
    checkpoint writes are not training time. A CPU reports no MFU: its peak depends on what else runs on it."""

    def on_fit_start(self, trainer: Trainer) -> None:
        self.on_gpu = trainer.device.type == "cuda"
        self.peak: float | None = None
        self.session_started, self.session_flops = time.perf_counter(), 0.0
        self.paused_at: float | None = None
        self._restart()

    def _restart(self) -> None:
        self.tokens, self.flops, self.started = 0, 0.0, time.perf_counter()

    def on_update_read(self, trainer: Trainer, update: ReadUpdate) -> None:
        self.tokens += update.result.tokens
        if self.on_gpu and update.result.finite:
            flops = sum(training_flops(trainer.config.model, *trainer.data.flop_shape(b)) for b in update.group)
            self.flops += flops
            self.session_flops += flops

    def on_evaluation_start(self, trainer: Trainer) -> None:
        self._pause()

    def on_checkpoint_start(self, trainer: Trainer, reason: str) -> None:
        self._pause()

    def _pause(self) -> None:
        if self.paused_at is None:
            self.paused_at = time.perf_counter()

    def on_checkpoint_end(self, trainer: Trainer, reason: str) -> None:  # an evaluation always ends with one
        if self.paused_at is not None:
            self.started += time.perf_counter() - self.paused_at
            self.paused_at = None

    def on_log(self, trainer: Trainer, line: LogLine) -> None:
        seconds = max(time.perf_counter() - self.started, 1e-9)
        line.tokens_per_s = round(self.tokens / seconds, 1)
        line.mfu = self._mfu(trainer, self.flops / seconds)
        self._restart()

    def on_fit_end(self, trainer: Trainer, summary: RunSummary | None) -> None:
        if summary is not None:  # compilation, evaluations and checkpoints count: the device trained in none of them
            summary.mfu = self._mfu(trainer, self.session_flops / max(time.perf_counter() - self.session_started,
                                                                      1e-9))

    def _mfu(self, trainer: Trainer, flops_per_second: float) -> float | None:
        if not self.on_gpu:
            return None
        if self.peak is None:
            self.peak, _ = peak_flops(trainer.device, trainer.precision)
        return float(f"{flops_per_second / self.peak:.4g}")  # significant digits: a small model's is below 1e-4


class ProgressBar(Callback):
    """A bar of updates with the newest loss, learning rate, tokens/s and MFU on a terminal; in a log, a line
    of the same every ``VASWANI_PROGRESS_SECONDS`` (vaswani.progress). A run on the clock
    (``train.max_minutes``) sizes the bar to the updates its time left allows at this session's average pace,
    so its ETA is the run's (and the bar's own ETA uses that pace: no smoothing)."""

    def on_fit_start(self, trainer: Trainer) -> None:
        self.on_the_clock = trainer.config.train.max_minutes is not None
        self.session_start = (trainer.progress.step, trainer.progress.elapsed_seconds)
        self.bar = progress_reporter(trainer.total_steps, "training", "steps", initial=trainer.progress.step,
                                     smoothing=0 if self.on_the_clock else 0.3)

    def on_update_end(self, trainer: Trainer, result: StepResult | DeferredStepResult) -> None:
        self.bar.update(trainer.progress.step - self.bar.n)  # a skipped update (read at once) is not counted

    def on_log(self, trainer: Trainer, line: LogLine) -> None:
        self.bar.set_postfix(loss=f"{line.loss:.3f}", lr=f"{line.lr:.2e}", tok_s=f"{line.tokens_per_s or 0:,.0f}",
                             **({"mfu": f"{line.mfu:.1%}"} if line.mfu is not None else {}))
        if self.on_the_clock:
            start_step, start_seconds = self.session_start
            seconds = trainer.progress.elapsed_seconds - start_seconds
            pace = (trainer.progress.step - start_step) / seconds if seconds > 0 else None
            seconds_left = 60 * trainer.config.train.max_minutes - trainer.progress.elapsed_seconds
            self.bar.total = updates_within_budget(trainer.progress.step, trainer.total_steps, seconds_left, pace)
            self.bar.refresh()

    def on_fit_end(self, trainer: Trainer, summary: RunSummary | None) -> None:
        self.bar.close()


def updates_within_budget(step: int, planned: int | None, seconds_left: float,
                          updates_per_second: float | None) -> int | None:
    """The update a wall-clock budget is expected to end at, at the current pace; never past the planned
    number of updates, never before the current one. Without a pace yet, the plan."""
    if not updates_per_second:
        return planned
    reachable = step + int(max(seconds_left, 0.0) * updates_per_second)
    return max(step, reachable if planned is None else min(planned, reachable))


class MetricsWriter(Callback):
    """``metrics.jsonl`` and TensorBoard (training/metrics.py): a "train" record per log line, a "valid" record per
    evaluation, a "nonfinite" record per skipped update; the plots redrawn after each evaluation's checkpoint."""

    def on_fit_start(self, trainer: Trainer) -> None:
        self.log = MetricsLog(trainer.run_dir, tensorboard=True)
        if trainer.resumed_from is not None:  # records after the checkpoint will be written again
            self.log.truncate_after(trainer.progress.step)

    def on_update_read(self, trainer: Trainer, update: ReadUpdate) -> None:
        if not update.result.finite:
            loss = update.result.loss_sum
            self.log.write("nonfinite", update.number - 1, loss=loss if math.isfinite(loss) else str(loss),
                           consecutive=trainer.progress.consecutive_nonfinite)

    def on_log(self, trainer: Trainer, line: LogLine) -> None:
        values = {key: value for key, value in asdict(line).items()
                  if key != "step" and not (key == "mfu" and value is None)}  # MFU is a GPU's only
        self.log.write("train", line.step, **values)

    def on_evaluation(self, trainer: Trainer, result: ValidationResult) -> None:
        self.log.write("valid", trainer.progress.step, epoch=trainer.epochs_done(), **to_json(result),
                       improved=trainer.progress.evals_without_improvement == 0)

    def on_checkpoint_end(self, trainer: Trainer, reason: str) -> None:
        if reason in ("best", "eval"):
            plot_run(trainer.run_dir)

    def on_fit_end(self, trainer: Trainer, summary: RunSummary | None) -> None:
        self.log.close()


class Printer(Callback):
    """A line on stderr for each evaluation, each skipped update, and how the run stopped."""

    def on_update_read(self, trainer: Trainer, update: ReadUpdate) -> None:
        if not update.result.finite:
            print(f"step {update.number}: non-finite loss/gradient ({update.result.loss_sum}); update skipped "
                  f"({trainer.progress.consecutive_nonfinite} in a row)", file=sys.stderr)

    def on_evaluation(self, trainer: Trainer, result: ValidationResult) -> None:
        message = (f"step {trainer.progress.step} epoch {trainer.epochs_done():g}: val loss {result.loss:.4f} "
                   f"(nll {result.nll:.4f}, ppl {math.exp(result.nll):.2f})")
        if result.bleu is not None:
            message += f", greedy BLEU {result.bleu:.2f} on {result.bleu_sentences} sentences"
        print(message + (" *" if trainer.progress.evals_without_improvement == 0 else ""), file=sys.stderr)

    def on_fit_end(self, trainer: Trainer, summary: RunSummary | None) -> None:
        training = trainer.config.train
        if summary is not None and summary.stop_reason is Stop.EARLY_STOP:
            print(f"early stopping: no improvement of {training.early_stopping_metric} for {training.patience} "
                  "evaluations", file=sys.stderr)
        if summary is not None and summary.stop_reason is Stop.INTERRUPTED:
            print(f"interrupted by {summary.signal}: saved a checkpoint at step {summary.step}; continue with "
                  "--resume", file=sys.stderr)


def reporting(progress_bar: bool) -> list[Callback]:
    """The callbacks of a run's main process: its rates first, then what writes and shows them (the metrics log
    first: a directory it cannot write stops the run before a bar is drawn)."""
    return [Throughput(), MetricsWriter(), *([ProgressBar()] if progress_bar else []), Printer()]


__all__ = ["Callback", "LogLine", "MetricsWriter", "Printer", "ProgressBar", "ReadUpdate", "Throughput",
           "reporting", "updates_within_budget"]
