"""Model FLOPs of a training step and the device's peak rate, for model-FLOPs utilisation (MFU).

Counts multiply-adds of the matmuls (2 FLOPs each) in the forward pass and multiplies by 3 for forward+backward,
the convention of the PaLM paper's MFU. Embedding lookups, norms and softmax are ignored (a few percent).
"""

from __future__ import annotations

import time

import torch

from vaswani.config import ModelConfig
from vaswani.devices import synchronize

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


def forward_flops(config: ModelConfig, src_tokens: int, tgt_tokens: int, src_len: int, tgt_len: int) -> float:
    """Matmul FLOPs of one forward pass over a batch with the given real-token counts and padded lengths."""
    d, f, v = config.d_model, config.d_ff, config.vocab_size
    window_src = min(src_len, config.sliding_window or src_len)
    window_tgt = min(tgt_len, config.sliding_window or tgt_len)
    per_src_token = config.n_encoder_layers * (2 * 4 * d * d + 2 * 2 * d * f + 2 * 2 * window_src * d) + (
        config.n_decoder_layers * 2 * 2 * d * d  # every decoder layer's cross-attention keys and values of the source
    )
    per_tgt_token = config.n_decoder_layers * (
        2 * 4 * d * d + 2 * 2 * window_tgt * d / 2  # self-attention: causal, half the scores on average
        + 2 * 2 * d * d + 2 * 2 * src_len * d  # cross-attention: queries and output projection, scores
        + 2 * 2 * d * f
    ) + 2 * d * v  # output projection
    return per_src_token * src_tokens + per_tgt_token * tgt_tokens


def training_flops(config: ModelConfig, src_tokens: int, tgt_tokens: int, src_len: int, tgt_len: int) -> float:
    return 3.0 * forward_flops(config, src_tokens, tgt_tokens, src_len, tgt_len)


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
