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


def rank_device(requested: str, local_rank: int = 0, local_ranks: int = 1, gpus: int = 0) -> torch.device:
    """The device one process computes on: the rule, with the machine's facts passed in.

    ``requested`` is a setting (auto, cpu, cuda, cuda:N); ``local_rank`` of ``local_ranks`` processes on this
    machine (torchrun's LOCAL_RANK and LOCAL_WORLD_SIZE; 0 of 1 without it); ``gpus`` CUDA devices are visible.
    "auto" is CUDA when there is a GPU, else CPU. On CUDA each local rank gets its own GPU, ``cuda:<local rank>``:
    two ranks on one GPU would share its memory and, under NCCL, fail. So more ranks than GPUs, a pinned
    ``cuda:N`` under several ranks, and CUDA without a GPU are one-line errors that say what to run instead.
    CPU processes (gloo) need no GPU and any number of them share the cores.
    """
    if requested == "auto":
        requested = "cuda" if gpus > 0 else "cpu"
    try:
        device = torch.device(requested)
    except RuntimeError:
        raise ConfigError(f"device {requested!r} is not a device name; use auto, cpu, cuda or cuda:N") from None
    if device.type != "cuda":
        return device
    if gpus == 0:
        raise EnvironmentFault(f"device {requested!r} was asked for but no CUDA device is visible (torch "
                               f"{torch.__version__}, CUDA build: {torch.version.cuda or 'no'}); "
                               "use --device cpu or train.device=cpu")
    if local_ranks > gpus:
        raise EnvironmentFault(f"{local_ranks} processes on this machine but {gpus} CUDA device(s): one GPU per "
                               f"rank, so start at most {gpus} (torchrun --nproc_per_node {gpus}), or set "
                               "train.device=cpu to run the ranks on the CPU (gloo)")
    if device.index is None:
        return torch.device("cuda", local_rank)
    if device.index >= gpus:
        raise EnvironmentFault(f"device {requested!r} was asked for but only {gpus} CUDA device(s) are visible")
    if local_ranks > 1:
        raise ConfigError(f"device {requested!r} pins all {local_ranks} ranks to one GPU; use train.device=cuda "
                          "(each rank takes the GPU of its local rank)")
    return device


def resolve_device(name: str | torch.device | None = "auto", local_rank: int = 0,
                   local_ranks: int = 1) -> torch.device:
    """:func:`rank_device` on this machine: "auto" (or None) -> CUDA when visible, else CPU; an explicit "cuda"
    without a GPU is an error, not a silent CPU run. ``local_rank`` of ``local_ranks`` picks this process's GPU
    under torchrun."""
    name = str(name) if name is not None else "auto"
    kind = name.split(":")[0]
    if kind not in ("auto", "cpu", "cuda") and _is_device_type(kind) and not _available(kind):
        # Without this, the first tensor moved there fails deep inside torch or safetensors ("not linked with
        # support for mps devices"), which reads like a broken checkpoint.
        raise EnvironmentFault(f"device {name!r} was asked for but this torch build ({torch.__version__}) cannot "
                               f"use {kind} devices here; use --device cpu or train.device=cpu")
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    return rank_device(name, local_rank, local_ranks, gpus)


def _is_device_type(name: str) -> bool:
    try:
        torch.device(name)
    except RuntimeError:
        return False
    return True


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
