"""Saving and loading model weights: safetensors + the architecture as JSON. Loading never executes code.

A *checkpoint directory* is self-contained for inference::

    model.safetensors   weights (tied matrices stored once)
    model.json          the ModelConfig
    tokenizer.json      written beside it by the data/training code

A *run directory* holds ``checkpoints/best`` and ``checkpoints/last``; :func:`resolve_checkpoint` accepts either.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import load_model as load_safetensors_into
from safetensors.torch import save_model as save_safetensors_from

from vaswani.config import ModelConfig
from vaswani.errors import VaswaniError
from vaswani.io import atomic_write, atomic_write_bytes
from vaswani.model.transformer import Transformer

WEIGHTS_FILE = "model.safetensors"
CONFIG_FILE = "model.json"


def save_model(model: Transformer, directory: str | Path) -> None:
    """Write ``model.safetensors`` and ``model.json`` atomically into ``directory``."""
    directory = Path(directory)
    atomic_write(directory / WEIGHTS_FILE, lambda tmp: save_safetensors_from(model, tmp))
    atomic_write_bytes(directory / CONFIG_FILE, json.dumps(model.config.to_dict(), indent=2).encode())


def resolve_checkpoint(path: str | Path) -> Path:
    """A checkpoint directory, or a run directory (its ``checkpoints/best``, else ``checkpoints/last``)."""
    path = Path(path)
    for candidate in (path, path / "checkpoints" / "best", path / "checkpoints" / "last"):
        if (candidate / WEIGHTS_FILE).is_file() and (candidate / CONFIG_FILE).is_file():
            return candidate
    raise VaswaniError(
        f"{path}: no checkpoint found (expected {WEIGHTS_FILE} + {CONFIG_FILE} in it or in checkpoints/best|last)"
    )


def load_model(path: str | Path, device: torch.device | str = "cpu") -> Transformer:
    """Build the model from ``model.json`` and load its weights from safetensors (no pickle anywhere)."""
    directory = resolve_checkpoint(path)
    try:
        config = ModelConfig.from_dict(json.loads((directory / CONFIG_FILE).read_text()))
    except json.JSONDecodeError as error:
        raise VaswaniError(f"{directory / CONFIG_FILE}: not valid JSON ({error})") from None
    model = Transformer(config)
    missing, unexpected = load_safetensors_into(model, directory / WEIGHTS_FILE, strict=False, device=str(device))
    if missing or unexpected:
        raise VaswaniError(
            f"{directory / WEIGHTS_FILE}: weights do not match model.json (missing {missing[:3]}, "
            f"unexpected {unexpected[:3]})"
        )
    return model.to(device)
