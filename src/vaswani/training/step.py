"""One optimizer update: the unit of work every caller that trains shares — the Trainer, the studies and
``vaswani bench train`` all call :func:`train_step`, so what they time or measure is what training runs.

    forward in the configured precision → label-smoothed loss summed over real target tokens
    → backward of loss / tokens (the whole update's tokens, every micro-batch and rank)
    → every rank agrees the loss (and gradient norm) are finite → unscale, clip → optimizer (+ scaler, schedule)
    → gradients set to None

A non-finite update changes no weight: it is reported (``finite=False``) and the caller decides what to do. The
learning-rate schedule advances on it as on any update, so a skipped update means the same whether the host read
the loss at once or the device decided (``defer_reads``).

``train_step(..., defer_reads=True)`` is the same update for a GPU, where reading the loss on the host after each
update would make the host wait for the device: its values stay on the device until :func:`read_results`.
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass
from typing import Callable, Iterable, Protocol, Sequence

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from vaswani.precision import autocast
from vaswani.training.distributed import World


class TeacherForcedBatch(Protocol):
    """What a training step reads from a batch (``vaswani.data.Batch`` has it)."""

    src: torch.Tensor  # (B, S) source ids, padded
    tgt_in: torch.Tensor  # (B, T) <s> y1 … ym, padded
    tgt_out: torch.Tensor  # (B, T) y1 … ym </s>, padded (padding is ignored by the loss)


@dataclass
class StepResult:
    """Sums over the update's real target tokens (all micro-batches, all ranks)."""

    finite: bool
    loss_sum: float  # the optimised (label-smoothed) loss
    nll_sum: float  # without smoothing: exp(nll / tokens) is the perplexity
    correct: float  # argmax predictions equal to the target
    tokens: int  # real target tokens: the normaliser of the update
    grad_norm: float  # before clipping; nan when clipping is off

    @property
    def loss(self) -> float:
        return self.loss_sum / self.tokens

    @property
    def nll(self) -> float:
        return self.nll_sum / self.tokens

    @property
    def accuracy(self) -> float:
        return self.correct / self.tokens


@dataclass
class DeferredStepResult:
    """An update of ``train_step(..., defer_reads=True)`` whose values are still on the device;
    :func:`read_results` brings any number of them to the host in one wait."""

    values: torch.Tensor  # (5,) float32: loss_sum, nll_sum, correct, grad_norm, 1.0 if the update was skipped
    tokens: int  # real target tokens: the normaliser of the update (known on the host)


def train_step(
    loss_model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    micro_batches: Iterable[TeacherForcedBatch],
    tokens: int,
    precision: str = "fp32",
    clip_grad_norm: float | None = None,
    scaler: torch.amp.GradScaler | None = None,
    scheduler: torch.optim.lr_scheduler.LRScheduler | None = None,
    weights: Sequence[float] | None = None,
    world: World | None = None,
    on_phase: Callable[[str], None] | None = None,
    defer_reads: bool = False,
) -> StepResult | DeferredStepResult:
    """One update over ``micro_batches`` (gradient accumulation when there are several).

    ``loss_model`` maps (src, tgt_in, tgt_out) to (loss_sum, nll_sum, n_correct) — a
    :class:`~vaswani.training.loss.TranslationLoss`, possibly wrapped by DDP or ``torch.compile``. ``tokens`` is
    the real target tokens of the whole update over every rank: the loss is normalised by it, so N ranks compute
    the update of one process with N× the accumulation. ``weights`` (one per micro-batch, default 1) lets a rank
    without a batch of its own join DDP's collective backward with weight 0. ``on_phase`` is called with
    "forward", "backward" and "optimizer" right after each phase (the studies time phases with it).

    ``defer_reads``: no host read of a device value; the device decides whether the update is taken, and the
    result is a :class:`DeferredStepResult` (else a :class:`StepResult`).
    """
    if defer_reads and not optimizer.defaults.get("fused"):
        raise ValueError("deferred reads need a fused optimizer: only its kernel skips an update on the device")
    world = world or World()
    rank_sums = _accumulate(loss_model, micro_batches, tokens, precision, scaler, weights, world, on_phase)
    apply = _apply_deferred if defer_reads else _apply_read
    result = apply(loss_model, optimizer, rank_sums, tokens, clip_grad_norm, scaler, world)
    # One rule for a skipped update, whichever way it was decided: it changes no weight, and the schedule advances
    # as for any update (the schedule counts updates tried, which the host knows without reading the device).
    if scheduler is not None:
        scheduler.step()
    optimizer.zero_grad(set_to_none=True)
    _notify(on_phase, "optimizer")
    return result


def _accumulate(loss_model: torch.nn.Module, micro_batches: Iterable[TeacherForcedBatch], tokens: int,
                precision: str, scaler: torch.amp.GradScaler | None, weights: Sequence[float] | None, world: World,
                on_phase: Callable[[str], None] | None) -> torch.Tensor:
    """Forward and backward of every micro-batch, gradients summed; this rank's (loss, nll, correct) sums."""
    batches = list(micro_batches)
    weights = list(weights) if weights is not None else [1.0] * len(batches)
    distributed = isinstance(loss_model, DistributedDataParallel)
    loss_model.train()
    sums = []  # per micro-batch (loss, nll, correct) tensors, this rank's
    for i, (batch, weight) in enumerate(zip(batches, weights)):
        # DDP all-reduces gradients in backward; only the last micro-batch of the update needs to.
        last = i == len(batches) - 1
        with contextlib.nullcontext() if last or not distributed else loss_model.no_sync():
            with autocast(batch.src.device, precision):
                batch_loss, batch_nll, batch_correct = loss_model(batch.src, batch.tgt_in, batch.tgt_out)
            _notify(on_phase, "forward")
            # DDP averages gradients over ranks: multiplying by the world size turns that into a sum.
            scaled = batch_loss * (weight * world.size / tokens)
            (scaler.scale(scaled) if scaler is not None else scaled).backward()
            _notify(on_phase, "backward")
        sums.append(torch.stack([batch_loss.detach().float(), batch_nll.float(), batch_correct.float()]) * weight)
    return torch.stack(sums).sum(0)


def _apply_read(loss_model: torch.nn.Module, optimizer: torch.optim.Optimizer, rank_sums: torch.Tensor, tokens: int,
                clip_grad_norm: float | None, scaler: torch.amp.GradScaler | None, world: World) -> StepResult:
    """The update decided on the host: the sums and the gradient norm are read, and a non-finite one (on any rank:
    every rank takes the same decision, or their weights would drift apart) is not applied."""
    loss_sum, nll_sum, correct = (world.sum(v) for v in rank_sums.tolist())
    finite, grad_norm = math.isfinite(loss_sum), float("nan")
    if finite and scaler is not None:
        scaler.unscale_(optimizer)
    if finite and clip_grad_norm:
        grad_norm = float(torch.nn.utils.clip_grad_norm_(loss_model.parameters(), clip_grad_norm))
        finite = world.sum(0.0 if math.isfinite(grad_norm) else 1.0) == 0
    if finite:
        if scaler is not None:
            scaler.step(optimizer)
            scaler.update()
        else:
            optimizer.step()
    elif scaler is not None and scaler.is_enabled():
        scaler.update()  # an fp16 overflow: let the scaler lower its scale for the next try
    return StepResult(finite, loss_sum, nll_sum, correct, tokens, grad_norm)


def _apply_deferred(loss_model: torch.nn.Module, optimizer: torch.optim.Optimizer, rank_sums: torch.Tensor,
                    tokens: int, clip_grad_norm: float | None, scaler: torch.amp.GradScaler | None,
                    world: World) -> DeferredStepResult:
    """The update decided on the device: the skip flag (loss or gradient norm not finite, on any rank) goes to the
    fused optimizer as ``found_inf``, the mechanism GradScaler uses, and its kernel then changes no weight, moment or
    step count. The gradient norm is measured even without clipping (the skip reads it)."""
    if world.distributed:
        dist.all_reduce(rank_sums)
    if scaler is not None:
        scaler.unscale_(optimizer)
    parameters = list(loss_model.parameters())
    norm = (torch.nn.utils.clip_grad_norm_(parameters, clip_grad_norm) if clip_grad_norm else
            torch.nn.utils.get_total_norm([p.grad for p in parameters if p.grad is not None]))
    skipped = (~(torch.isfinite(rank_sums[0]) & torch.isfinite(norm))).float()
    if world.distributed:
        dist.all_reduce(skipped, op=dist.ReduceOp.MAX)
    optimizer.found_inf = skipped  # the fused kernel skips the update when it is 1
    try:
        optimizer.step()
    finally:
        del optimizer.found_inf
    if scaler is not None:
        scaler.update()  # an fp16 overflow lowers the scale for the next update (disabled scaler: nothing)
    return DeferredStepResult(torch.cat([rank_sums, norm.reshape(1).float(), skipped.reshape(1)]), tokens)


def read_results(results: Sequence[DeferredStepResult]) -> list[StepResult]:
    """The values of deferred updates on the host, in one wait for the device."""
    if not results:
        return []
    rows = torch.stack([result.values for result in results]).tolist()
    return [StepResult(skipped == 0.0, loss_sum, nll_sum, correct, result.tokens, grad_norm)
            for result, (loss_sum, nll_sum, correct, grad_norm, skipped) in zip(results, rows)]


def _notify(on_phase: Callable[[str], None] | None, phase: str) -> None:
    if on_phase is not None:
        on_phase(phase)
