"""Dropout (section 5.4 of the paper: on every sublayer output, and on the embedding sums), cheap on the CPU.

``F.dropout`` draws one Bernoulli sample per element through ``bernoulli_`` and keeps a float mask for backward.
On the CPU that is the largest cost of a training step after the matrix products (12-14 % of a step of the
Multi30k preset, profiled by ``vaswani bench train --profile``). Here each 64-bit draw of the generator is cut into
four 16-bit integers and an element is kept when its integer clears a threshold: four times fewer draws, and a
1-byte boolean mask saved for backward instead of a 4-byte float one.

The drop probability is therefore ``round(p · 65536) / 65536`` (0.1 becomes 0.100006), and the kept values are
scaled by the inverse of the *actual* keep probability, so the expected output equals the input exactly, as with
``F.dropout``. On other devices ``F.dropout`` is already one fused kernel, and is used as it is.

The random numbers come from torch's default generator, so ``torch.manual_seed`` and a checkpoint's saved RNG
state make the masks reproducible (resume stays bit-exact).
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

_LEVELS = 1 << 16  # the drop probability is resolved to 1/65536


def _keep_mask(shape: torch.Size, p: float, device: torch.device) -> tuple[torch.Tensor, float]:
    """A boolean mask, True with probability 1 - round(p·65536)/65536, and the scale 1 / that probability."""
    dropped_levels = round(p * _LEVELS)
    n = shape.numel()
    # random_ over the whole int64 range: every bit is uniform (plain random_() leaves the sign bit at 0, which
    # would bias one of the four 16-bit lanes).
    words = torch.empty((n + 3) // 4, dtype=torch.int64, device=device).random_(-(2**63), 2**63 - 1)
    lanes = words.view(torch.int16)[:n].view(shape)  # uniform on [-32768, 32767]
    keep = lanes >= dropped_levels - _LEVELS // 2
    return keep, _LEVELS / (_LEVELS - dropped_levels)


class _MaskedScale(torch.autograd.Function):
    """x · keep · scale, with the boolean mask (not a float copy) saved for backward."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, keep: torch.Tensor, scale: float) -> torch.Tensor:
        ctx.save_for_backward(keep)
        ctx.scale = scale
        return x.mul(keep).mul_(scale)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        (keep,) = ctx.saved_tensors
        return grad.mul(keep).mul_(ctx.scale), None, None


def dropout(x: torch.Tensor, p: float, training: bool = True) -> torch.Tensor:
    """``F.dropout(x, p, training)`` with the CPU masks described above."""
    if not training or p == 0.0:
        return x
    if x.device.type != "cpu" or not 0.0 < p < 1.0:
        return F.dropout(x, p, training)
    keep, scale = _keep_mask(x.shape, p, x.device)
    return _MaskedScale.apply(x, keep, scale)


class Dropout(nn.Module):
    """Drop-in for ``nn.Dropout`` built on :func:`dropout`."""

    def __init__(self, p: float = 0.5):
        super().__init__()
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"dropout probability must be in [0, 1], got {p}")
        self.p = p

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return dropout(x, self.p, self.training)

    def extra_repr(self) -> str:
        return f"p={self.p}"
