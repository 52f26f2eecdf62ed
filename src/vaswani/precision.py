"""Which floating-point precision to compute in, decided by what the hardware really does fast.

bf16 autocast is a large win where the hardware has bf16 matrix units (recent GPUs; CPUs with AVX512-BF16 or
AMX), and a large loss where it does not: on an AVX2-only CPU, PyTorch emulates bf16 matmuls and a
training step runs ~15x slower than in fp32 (results/bench/). So "auto" measures instead of assuming.

The measurement can be overridden: ``VASWANI_CPU_BF16=fast`` makes "auto" resolve on any CPU as it does on a CPU
with bf16 units, ``VASWANI_CPU_BF16=slow`` as on an AVX2-only CPU. The suite runs once each way (``.ci/run``), so
either machine class checks the other's path.
"""

from __future__ import annotations

import contextlib
import functools
import os
import time

import torch

from vaswani.errors import ConfigError
from vaswani.settings import PRECISIONS

CPU_BF16_OVERRIDE = "VASWANI_CPU_BF16"
CPU_BF16_CHOICES = {"fast": True, "slow": False}


@functools.lru_cache(maxsize=None)
def bf16_is_fast(device_type: str) -> bool:
    """True when a bf16 matmul beats fp32 on this device (always on CUDA devices that support bf16)."""
    if device_type == "cuda":
        return torch.cuda.is_available() and torch.cuda.is_bf16_supported()
    if device_type != "cpu":
        return False
    override = cpu_bf16_override(os.environ.get(CPU_BF16_OVERRIDE))
    if override is not None:
        return override
    return faster_of(_matmul_seconds(torch.bfloat16), _matmul_seconds(torch.float32))


def cpu_bf16_override(value: str | None) -> bool | None:
    """The CPU's bf16 answer set by ``VASWANI_CPU_BF16`` (None: unset, measure it)."""
    if not value:
        return None
    if value not in CPU_BF16_CHOICES:
        raise ConfigError(f"{CPU_BF16_OVERRIDE}={value!r} is not one of {', '.join(CPU_BF16_CHOICES)}; unset it to "
                          "let vaswani measure whether bf16 is fast on this CPU")
    return CPU_BF16_CHOICES[value]


def faster_of(bf16_trials: list[float], fp32_trials: list[float]) -> bool:
    """Whether bf16 is faster, from interleaved timings of each: the fastest trial of each, since a trial can only be
    slowed (by another process taking the core, as data preparation's workers do at the start of a run), never
    sped up. One preempted trial among a few must not decide the precision of a whole run: on an AVX-512 CPU
    without bf16 units a bf16 training step is about 2.5 times slower than fp32."""
    return min(bf16_trials) < min(fp32_trials)


def _matmul_seconds(dtype: torch.dtype, size: int = 256, trials: int = 5, repeats: int = 3) -> list[float]:
    a = torch.randn(size, size).to(dtype)
    b = torch.randn(size, size).to(dtype)
    a @ b
    times = []
    for _ in range(trials):
        start = time.perf_counter()
        for _ in range(repeats):
            a @ b
        times.append(time.perf_counter() - start)
    return times


def choose_precision(requested: str, device_type: str, bf16_fast: bool) -> str:
    """The rule, with the hardware's answer passed in: "auto" -> bf16 where bf16 is fast, else fp16 on a GPU (its
    half-precision units, with the gradient scaler), else fp32; explicit values are checked (fp16 only on CUDA)."""
    if requested == "auto":
        if bf16_fast:
            return "bf16"
        return "fp16" if device_type == "cuda" else "fp32"
    if requested not in PRECISIONS:
        raise ConfigError(f"precision must be one of {', '.join(PRECISIONS)}, got {requested!r}")
    if requested == "fp16" and device_type != "cuda":
        raise ConfigError("precision fp16 needs a CUDA device; use bf16 or fp32 on CPU")
    return requested


def resolve_precision(precision: str, device: torch.device) -> str:
    """:func:`choose_precision` on this machine (bf16's speed is measured once per device type, and only for
    "auto")."""
    return choose_precision(precision, device.type, precision == "auto" and bf16_is_fast(device.type))


def autocast(device: torch.device, precision: str) -> contextlib.AbstractContextManager:
    if precision == "fp32":
        return contextlib.nullcontext()
    dtype = torch.bfloat16 if precision == "bf16" else torch.float16
    return torch.autocast(device.type, dtype=dtype)
