"""Where a number was measured: a speed means little without the machine it was measured on."""

from __future__ import annotations

import os
import platform
from typing import Any

import torch


def hardware(device: torch.device | str) -> dict[str, Any]:
    """Platform, CPU, torch version and thread count, and the name of the device that ran the model."""
    device = torch.device(device)
    return {
        "platform": platform.platform(),
        "processor": _cpu_name(),
        "cpu_count": _cpu_count(),
        "torch": torch.__version__,
        "torch_threads": torch.get_num_threads(),
        "device": str(device),
        "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else _cpu_name(),
    }


def _cpu_count() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as handle:
            for line in handle:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()
