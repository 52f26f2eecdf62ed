"""Teacher-forced translation loss: label-smoothed cross-entropy over real target tokens only."""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn as nn

from vaswani.model import Transformer


@dataclass
class LossOutput:
    loss_sum: torch.Tensor  # summed over real target tokens (divide by the token count of the whole update)
    nll_sum: torch.Tensor  # without label smoothing: the quantity whose exp is perplexity
    n_tokens: int
    n_correct: torch.Tensor
    hits: torch.Tensor  # (n_tokens,) bool: argmax == target, real positions in row-major order


class _SmoothedCrossEntropy(torch.autograd.Function):
    """Label-smoothed cross-entropy summed over rows, with the gradient written out by hand.

    The smoothed target puts 1 - ε on the reference token and ε/V on every token (F.cross_entropy's
    convention), so with p = softmax(logits) the loss of a row is (1 - ε)·(-log p_y) + ε·mean_v(-log p_v) and its
    gradient is simply p - target. Autograd through log_softmax, gather and mean would allocate three (N, V)
    tensors in backward; here the log-probs saved from forward *become* the gradient, in place (exp, scale,
    shift), so backward allocates nothing of size (N, V). The same log-probs give the unsmoothed NLL and the hits
    for free (no second cross-entropy, and a row maximum instead of an argmax, which is several times slower on
    the CPU).
    """

    @staticmethod
    def forward(ctx, logits: torch.Tensor, targets: torch.Tensor, smoothing: float, ignore_index: int | None):
        log_probs = torch.log_softmax(logits, dim=-1)  # (N, V)
        target_log_probs = log_probs.gather(1, targets[:, None]).squeeze(1)  # (N,)
        # The reference is the argmax when its score is the row's maximum (an exact tie counts as a hit).
        hits = target_log_probs >= log_probs.amax(-1)  # (N,) per-token, for per-position accuracy
        if ignore_index is None:
            nll_sum = -target_log_probs.sum()
            row_sums = log_probs.sum() if smoothing else None
            real = None
        else:  # rows whose target is ignore_index add nothing (and get no gradient)
            real = targets != ignore_index
            nll_sum = -torch.where(real, target_log_probs, 0.0).sum()
            row_sums = torch.where(real, log_probs.sum(-1), 0.0).sum() if smoothing else None
            hits = hits & real
        loss = nll_sum * (1.0 - smoothing)
        if smoothing:
            loss = loss - row_sums * (smoothing / log_probs.size(-1))
        ctx.save_for_backward(log_probs, targets, real)
        ctx.smoothing = smoothing
        ctx.consumed = False
        ctx.mark_non_differentiable(nll_sum, hits)
        return loss, nll_sum, hits

    @staticmethod
    def backward(ctx, grad_loss: torch.Tensor, _grad_nll: torch.Tensor, _grad_correct: torch.Tensor):
        if ctx.consumed:  # the saved log-probs were turned into the gradient in place
            raise RuntimeError("smoothed_cross_entropy supports one backward pass per forward (no retain_graph)")
        ctx.consumed = True
        log_probs, targets, real = ctx.saved_tensors
        smoothing = ctx.smoothing
        grad = log_probs.exp_().mul_(grad_loss)  # p · g
        if smoothing:
            grad.sub_(grad_loss * (smoothing / grad.size(-1)))
        grad[torch.arange(grad.size(0), device=grad.device), targets] -= grad_loss * (1.0 - smoothing)
        if real is not None:
            grad.mul_(real[:, None])
        return grad, None, None, None


def smoothed_cross_entropy(
    logits: torch.Tensor, targets: torch.Tensor, label_smoothing: float, ignore_index: int | None = None
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """logits (N, V), targets (N,) -> (loss_sum, nll_sum, hits (N,) bool); loss_sum equals
    ``F.cross_entropy(logits, targets, label_smoothing=label_smoothing, ignore_index=ignore_index, reduction="sum")``
    and so does its gradient. Rows whose target is ``ignore_index`` add nothing and are never hits. nll_sum and
    hits carry no gradient."""
    return _SmoothedCrossEntropy.apply(logits, targets, label_smoothing, ignore_index)


def translation_loss(
    model: Transformer, src: torch.Tensor, tgt_in: torch.Tensor, tgt_out: torch.Tensor, label_smoothing: float
) -> LossOutput:
    """Logits are computed for non-padding target positions only: padding never enters the loss, and the
    output projection (the largest matmul for small models) skips the padded fraction of the batch."""
    memory, memory_mask = model.encode(src)
    hidden = model.decode(tgt_in, memory, memory_mask)  # (B, T, D)
    real = tgt_out != model.config.pad_id
    logits = model.project(hidden[real]).float()  # (N, V)
    targets = tgt_out[real]
    loss_sum, nll_sum, hits = smoothed_cross_entropy(logits, targets, label_smoothing)
    return LossOutput(loss_sum, nll_sum, int(targets.numel()), hits.sum(), hits)


def translation_loss_over_all_positions(
    model: Transformer, src: torch.Tensor, tgt_in: torch.Tensor, tgt_out: torch.Tensor, label_smoothing: float
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(loss_sum, nll_sum, n_correct) of :func:`translation_loss` with logits for every target position, the
    padded ones masked out in the loss: every shape in it is the batch's, none depends on the data (see
    training/device_choices.py for when this is the better trade)."""
    memory, memory_mask = model.encode(src)
    hidden = model.decode(tgt_in, memory, memory_mask)  # (B, T, D)
    logits = model.project(hidden).float().flatten(0, 1)  # (B·T, V)
    loss_sum, nll_sum, hits = smoothed_cross_entropy(logits, tgt_out.flatten(), label_smoothing,
                                                     ignore_index=model.config.pad_id)
    return loss_sum, nll_sum, hits.sum()


class TranslationLoss(nn.Module):
    """The model plus its loss as one module, so DistributedDataParallel / torch.compile wrap a single forward
    (DDP only synchronises gradients of computations that ran through its own ``forward``). ``all_positions``:
    :func:`translation_loss_over_all_positions` rather than :func:`translation_loss` (the same values)."""

    def __init__(self, model: Transformer, label_smoothing: float, all_positions: bool = False):
        super().__init__()
        self.model = model
        self.label_smoothing = label_smoothing
        self.all_positions = all_positions

    def forward(
        self, src: torch.Tensor, tgt_in: torch.Tensor, tgt_out: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        if self.all_positions:
            return translation_loss_over_all_positions(self.model, src, tgt_in, tgt_out, self.label_smoothing)
        out = translation_loss(self.model, src, tgt_in, tgt_out, self.label_smoothing)
        return out.loss_sum, out.nll_sum, out.n_correct
