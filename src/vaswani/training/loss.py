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
    def forward(ctx, logits: torch.Tensor, targets: torch.Tensor, smoothing: float):
        log_probs = torch.log_softmax(logits, dim=-1)  # (N, V)
        target_log_probs = log_probs.gather(1, targets[:, None]).squeeze(1)  # (N,)
        nll_sum = -target_log_probs.sum()
        loss = nll_sum * (1.0 - smoothing)
        if smoothing:
            loss = loss - log_probs.sum() * (smoothing / log_probs.size(-1))
        # The reference is the argmax when its score is the row's maximum (an exact tie counts as a hit).
        hits = target_log_probs >= log_probs.amax(-1)  # (N,) per-token, for per-position accuracy
        ctx.save_for_backward(log_probs, targets)
        ctx.smoothing = smoothing
        ctx.consumed = False
        ctx.mark_non_differentiable(nll_sum, hits)
        return loss, nll_sum, hits

    @staticmethod
    def backward(ctx, grad_loss: torch.Tensor, _grad_nll: torch.Tensor, _grad_correct: torch.Tensor):
        if ctx.consumed:  # the saved log-probs were turned into the gradient in place
            raise RuntimeError("smoothed_cross_entropy supports one backward pass per forward (no retain_graph)")
        ctx.consumed = True
        log_probs, targets = ctx.saved_tensors
        smoothing = ctx.smoothing
        grad = log_probs.exp_().mul_(grad_loss)  # p · g
        if smoothing:
            grad.sub_(grad_loss * (smoothing / grad.size(-1)))
        grad[torch.arange(grad.size(0), device=grad.device), targets] -= grad_loss * (1.0 - smoothing)
        return grad, None, None


def smoothed_cross_entropy(
    logits: torch.Tensor, targets: torch.Tensor, label_smoothing: float
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """logits (N, V), targets (N,) -> (loss_sum, nll_sum, hits (N,) bool); loss_sum equals
    ``F.cross_entropy(logits, targets, label_smoothing=label_smoothing, reduction="sum")`` and so does its gradient.
    nll_sum and hits carry no gradient."""
    return _SmoothedCrossEntropy.apply(logits, targets, label_smoothing)


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


class TranslationLoss(nn.Module):
    """The model plus its loss as one module, so DistributedDataParallel / torch.compile wrap a single forward
    (DDP only synchronises gradients of computations that ran through its own ``forward``)."""

    def __init__(self, model: Transformer, label_smoothing: float):
        super().__init__()
        self.model = model
        self.label_smoothing = label_smoothing

    def forward(
        self, src: torch.Tensor, tgt_in: torch.Tensor, tgt_out: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        out = translation_loss(self.model, src, tgt_in, tgt_out, self.label_smoothing)
        return out.loss_sum, out.nll_sum, out.n_correct
