"""Which of PyTorch's fused attention kernels one ``F.scaled_dot_product_attention`` call may use.

The choice depends on the device, the dtype, the head size and whether the call carries an explicit mask; it is
made per call (:func:`allowed_kernels`), so the same model picks FlashAttention for decoder self-attention and the
memory-efficient kernel for padded cross-attention. ``tests/gpu`` checks that a CUDA device follows the rule.
"""

from __future__ import annotations

import contextlib
from typing import ContextManager

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

FLASH_HEAD_DIMS = range(8, 257, 8)  # head sizes FlashAttention takes


def sdpa_backends(device_type: str, dtype: torch.dtype, head_dim: int, masked: bool) -> list[SDPBackend] | None:
    """The kernels one SDPA call may use on this device, best first; None leaves the choice to PyTorch.

    On CUDA: FlashAttention where it applies (fp16/bf16, no explicit mask — causality goes as ``is_causal`` —
    and a head size it takes), else the memory-efficient kernel (fp32, padding or window masks). Never cuDNN
    attention, which PyTorch prefers on Hopper GPUs: it builds an execution plan for every new sequence length,
    and with batches of varying length that is a new plan almost every batch (on an H100: 2.7 ms of host time
    per call, a whole training run 2.6× slower than without it). The math path comes last, for inputs neither
    fused kernel takes: they run slowly rather than fail. On a CPU PyTorch's own choice is right: its fused CPU
    kernel, or the math path where that kernel cannot take the call (attention dropout).
    """
    if device_type != "cuda":
        return None
    flash = dtype in (torch.float16, torch.bfloat16) and not masked and head_dim in FLASH_HEAD_DIMS
    first = [SDPBackend.FLASH_ATTENTION] if flash else []
    return [*first, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH]


def allowed_kernels(q: torch.Tensor, masked: bool) -> ContextManager[None]:
    """Restrict the SDPA calls inside to the kernels :func:`sdpa_backends` allows for queries ``q`` (B, H, Q, d)."""
    backends = sdpa_backends(q.device.type, q.dtype, q.size(-1), masked=masked)
    return sdpa_kernel(backends, set_priority=True) if backends else contextlib.nullcontext()
