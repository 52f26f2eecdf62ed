"""Choosing the device and timing on it: shared by training, benchmarks and experiments."""

from __future__ import annotations

import ctypes
import sys

import torch

from vaswani.errors import ConfigError, EnvironmentFault


def device_type(name: str) -> str:
    """"auto" -> "cuda" when a GPU is visible, else "cpu"; an explicit name keeps its type ("cuda:1" -> "cuda")."""
    if name == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return torch.device(name).type


def resolve_device(name: str | torch.device | None = "auto", local_rank: int = 0) -> torch.device:
    """"auto" (or None) -> CUDA when visible, else CPU; an explicit "cuda" without a GPU is an error, not a silent
    CPU run. ``local_rank`` picks this process's GPU under torchrun."""
    if isinstance(name, torch.device):
        name = str(name)
    name = name or "auto"
    try:
        device = torch.device(device_type(name) if name == "auto" else name)
    except RuntimeError:
        raise ConfigError(f"device {name!r} is not a device name; use auto, cpu, cuda or cuda:N") from None
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise EnvironmentFault(f"device {name!r} was asked for but no CUDA device is visible (torch "
                                   f"{torch.__version__}, CUDA build: {torch.version.cuda or 'no'}); "
                                   "use --device cpu or train.device=cpu")
        if device.index is not None and device.index >= torch.cuda.device_count():
            raise EnvironmentFault(f"device {name!r} was asked for but only {torch.cuda.device_count()} CUDA "
                                   "device(s) are visible")
        if device.index is None:
            device = torch.device("cuda", local_rank)
    elif device.type != "cpu" and not _available(device.type):
        # Without this, the first tensor moved there fails deep inside torch or safetensors ("not linked with support
        # for mps devices"), which reads like a broken checkpoint.
        raise EnvironmentFault(f"device {name!r} was asked for but this torch build ({torch.__version__}) cannot use "
                               f"{device.type} devices here; use --device cpu or train.device=cpu")
    return device


def _available(device_type: str) -> bool:
    """Can this torch build use devices of ``device_type`` (mps, xpu, ...) on this machine?"""
    backend = getattr(torch, device_type, None)
    if device_type == "mps":
        backend = torch.backends.mps
    is_available = getattr(backend, "is_available", None)
    try:
        return bool(is_available()) if callable(is_available) else False
    except RuntimeError:
        return False


def synchronize(device: torch.device) -> None:
    """Wait for queued GPU work: without it a GPU timer measures the kernel launches, not the computation."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


# glibc's mallopt parameters (malloc.h)
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3


def reuse_freed_memory() -> bool:
    """Make this process keep the memory it frees for its next allocations (glibc only); True when applied.

    A CPU training step allocates and frees the same tensors every update, the largest being the (tokens ×
    vocabulary) logits and their gradient: 33-48 MB for the Multi30k preset. glibc serves a block that large with
    a fresh ``mmap`` and unmaps it on free, so every update pays page faults and the kernel's zeroing for each of
    them again (an elementwise op on such a fresh tensor took 26 ms instead of 2 ms). Raising the mmap and trim
    thresholds makes freed blocks stay in the heap and be reused, as PyTorch's caching allocator does on GPU. The
    price is that the process keeps its peak memory until it exits. Process-wide, and idempotent.
    """
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:  # not glibc (musl, ...): keep the system's behaviour
        return False
    return bool(libc.mallopt(_M_MMAP_THRESHOLD, 1 << 30)) and bool(libc.mallopt(_M_TRIM_THRESHOLD, (1 << 31) - 1))
