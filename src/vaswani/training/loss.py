"""Teacher-forced translation loss: label-smoothed cross-entropy over real target tokens only."""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

from vaswani.model import Transformer


@dataclass
class LossOutput:
    loss_sum: torch.Tensor  # summed over real target tokens (divide by the token count of the whole update)
    nll_sum: torch.Tensor  # without label smoothing: the quantity whose exp is perplexity
    n_tokens: int
    n_correct: torch.Tensor
    hits: torch.Tensor  # (n_tokens,) bool: argmax == target, real positions in row-major order


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
    loss_sum = F.cross_entropy(logits, targets, label_smoothing=label_smoothing, reduction="sum")
    with torch.no_grad():
        nll_sum = F.cross_entropy(logits, targets, reduction="sum") if label_smoothing else loss_sum.detach()
        hits = logits.argmax(-1) == targets
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
