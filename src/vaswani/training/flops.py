"""Model FLOPs of a training step and the device's peak rate, for model-FLOPs utilisation (MFU).

Counts multiply-adds of the matmuls (2 FLOPs each) in the forward pass and multiplies by 3 for forward+backward,
the convention of the PaLM paper's MFU. Embedding lookups, norms and softmax are ignored (a few percent).

One rule for attention, whatever the kernel executes: a query costs QKᵀ and (weights)V for each key the model's
masks let it attend to (``masks.attended_keys``: padding, causality and the sliding window), counted sentence by
sentence at its real length. A kernel may compute more scores than that (written-out attention computes every
causal score and masks half; the window's blocks read about 2k keys per query) or fewer: those are the kernel's
costs, not the model's. ``bench train``, the trainer's logged MFU and ``experiment attention`` all count this way.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Sequence

import torch

from vaswani.config import ModelConfig
from vaswani.devices import synchronize
from vaswani.model.masks import attended_keys

# Dense (non-sparse) peak TFLOP/s per precision, from the vendors' datasheets.
KNOWN_PEAKS_TFLOPS: dict[str, dict[str, float]] = {
    "H100": {"bf16": 989.0, "fp16": 989.0, "fp32": 67.0},  # SXM; the PCIe part is lower, matched first below
    "H100 PCIe": {"bf16": 756.0, "fp16": 756.0, "fp32": 51.0},
    "H200": {"bf16": 989.0, "fp16": 989.0, "fp32": 67.0},
    "A100": {"bf16": 312.0, "fp16": 312.0, "fp32": 19.5},
    "L4": {"bf16": 121.0, "fp16": 121.0, "fp32": 30.3},
    "A10": {"bf16": 125.0, "fp16": 125.0, "fp32": 31.2},
    "V100": {"fp16": 125.0, "fp32": 15.7},
    "T4": {"fp16": 65.0, "fp32": 8.1},
}


@functools.lru_cache(maxsize=4096)
def attended_pairs(length: int, causal: bool, window: int | None) -> int:
    """(query, key) pairs one self-attention over ``length`` real tokens computes under the model's masks."""
    return int(attended_keys(length, causal, window).sum())


def self_attention_flops(d_model: int, length: int, causal: bool, window: int | None = None) -> float:
    """Forward FLOPs of one self-attention layer over one sentence: the Q, K, V and output projections of every
    token, and QKᵀ and (weights)V for every (query, key) pair the masks allow."""
    return 2 * 4 * d_model * d_model * length + 2 * 2 * d_model * attended_pairs(length, causal, window)


def forward_flops(config: ModelConfig, src_lengths: Sequence[int], tgt_lengths: Sequence[int]) -> float:
    """Matmul FLOPs of one forward pass over a batch, given each sentence's real source and target length (the
    tokens the encoder reads and the decoder predicts, ``</s>`` and ``<s>`` included)."""
    d, f, window = config.d_model, config.d_ff, config.sliding_window
    total = 0.0
    for src, tgt in zip(src_lengths, tgt_lengths, strict=True):
        encoder = self_attention_flops(d, src, causal=False, window=window) + 2 * 2 * d * f * src
        decoder = (self_attention_flops(d, tgt, causal=True, window=window)
                   + 2 * 2 * d * d * (tgt + src)  # cross-attention: Q, output of the target; K, V of the source
                   + 2 * 2 * d * tgt * src  # cross-attention scores: every target token sees every source token
                   + 2 * 2 * d * f * tgt)
        total += config.n_encoder_layers * encoder + config.n_decoder_layers * decoder + 2 * d * config.vocab_size * tgt
    return total


def training_flops(config: ModelConfig, src_lengths: Sequence[int], tgt_lengths: Sequence[int]) -> float:
    """Forward + backward: backward computes two matmuls (input and weight gradients) per forward matmul."""
    return 3.0 * forward_flops(config, src_lengths, tgt_lengths)


def measured_matmul_flops(device: torch.device, dtype: torch.dtype, size: int | None = None,
                          repeats: int = 25) -> float:
    """FLOP/s of a square matmul large enough to hide every overhead: the practical peak where no datasheet value
    is known. On a CPU (1024², float32 ~15 ms) each product is timed alone and the fastest counts: a shared
    machine's slow moments measure the neighbours, not the hardware. On a GPU (4096²) one product is too short to
    time alone: ``repeats`` are queued back to back."""
    size = size or (1024 if device.type == "cpu" else 4096)
    a = torch.randn(size, size, device=device, dtype=dtype)
    b = torch.randn(size, size, device=device, dtype=dtype)
    a @ b  # warm-up: thread pool, caches, kernels
    synchronize(device)
    if device.type == "cpu":
        fastest = float("inf")
        for _ in range(repeats):
            start = time.perf_counter()
            a @ b
            fastest = min(fastest, time.perf_counter() - start)
        return 2 * size**3 / fastest
    start = time.perf_counter()
    for _ in range(repeats):
        a @ b
    synchronize(device)
    return 2 * size**3 * repeats / (time.perf_counter() - start)


def peak_flops(device: torch.device, precision: str) -> tuple[float, str]:
    """(peak FLOP/s, where the number comes from) for the device and precision in use."""
    if device.type == "cuda":
        name = torch.cuda.get_device_name(device)
        for key in sorted(KNOWN_PEAKS_TFLOPS, key=len, reverse=True):  # "H100 PCIe" before "H100"
            if key in name and precision in KNOWN_PEAKS_TFLOPS[key]:
                return KNOWN_PEAKS_TFLOPS[key][precision] * 1e12, f"datasheet {key} {precision}"
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision, torch.float32)
    return measured_matmul_flops(device, dtype), f"measured {precision} matmul"
