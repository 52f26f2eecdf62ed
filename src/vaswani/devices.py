"""Choosing the device and timing on it: shared by training, benchmarks and experiments."""

from __future__ import annotations

import torch

from vaswani.errors import ConfigError, EnvironmentFault


def resolve_device(name: str, local_rank: int = 0) -> torch.device:
    """"auto" -> CUDA when visible, else CPU; an explicit "cuda" without a GPU is an error, not a silent CPU run.
    ``local_rank`` picks this process's GPU under torchrun."""
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    try:
        device = torch.device(name)
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
    return device


def synchronize(device: torch.device) -> None:
    """Wait for queued GPU work: without it a GPU timer measures the kernel launches, not the computation."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
