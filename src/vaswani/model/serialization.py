"""Saving and loading model weights: safetensors + the architecture as JSON. Loading never executes code.

A *checkpoint directory* is self-contained for inference::

    model.safetensors   weights (tied matrices stored once)
    model.json          the ModelConfig
    tokenizer.json      written beside it by the data/training code

A *run directory* holds ``checkpoints/best`` and ``checkpoints/last``; :func:`resolve_checkpoint` accepts either.

Finding a checkpoint and reading its ``model.json`` import no torch (the CTranslate2 engine reads them without it);
torch and safetensors are imported by the functions that save or load weights.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

from vaswani.config import ModelConfig
from vaswani.errors import VaswaniError
from vaswani.io import atomic_write, atomic_write_bytes

if TYPE_CHECKING:
    import torch

    from vaswani.model.transformer import Transformer

WEIGHTS_FILE = "model.safetensors"
CONFIG_FILE = "model.json"


def save_model(model: Transformer, directory: str | Path) -> None:
    """Write ``model.safetensors`` and ``model.json`` atomically into ``directory``."""
    from safetensors.torch import save_model as save_safetensors_from

    directory = Path(directory)
    atomic_write(directory / WEIGHTS_FILE, lambda tmp: save_safetensors_from(model, tmp))
    atomic_write_bytes(directory / CONFIG_FILE, json.dumps(model.config.to_dict(), indent=2).encode())


def resolve_checkpoint(path: str | Path) -> Path:
    """A checkpoint directory, or a run directory: its ``checkpoints/final`` (the model chosen at the end of the
    run), else ``checkpoints/best``, else ``checkpoints/last``."""
    path = Path(path)
    for candidate in (path, *(path / "checkpoints" / name for name in ("final", "best", "last"))):
        if (candidate / WEIGHTS_FILE).is_file() and (candidate / CONFIG_FILE).is_file():
            return candidate
    raise VaswaniError(
        f"{path}: no checkpoint found (expected {WEIGHTS_FILE} + {CONFIG_FILE} in it or in checkpoints/final|best|last)"
    )


def load_model(path: str | Path, device: torch.device | str = "cpu") -> Transformer:
    """Build the model from ``model.json`` and load its weights from safetensors (no pickle anywhere)."""
    from vaswani.model.transformer import Transformer

    directory = resolve_checkpoint(path)
    model = Transformer(read_model_config(directory / CONFIG_FILE))
    load_weights(model, directory / WEIGHTS_FILE, device)
    return model.to(device)


def read_model_config(file: Path) -> ModelConfig:
    """The ModelConfig in ``model.json``; any fault in the file is a VaswaniError that names it."""
    try:
        return ModelConfig.from_dict(json.loads(file.read_text(encoding="utf-8")))
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise VaswaniError(f"{file}: not valid JSON ({error})") from None
    except VaswaniError as error:
        raise VaswaniError(f"{file}: {error}") from None
    except OSError as error:
        raise VaswaniError(f"{file}: cannot be read ({error.strerror or error})") from None


def load_weights(model: torch.nn.Module, file: Path, device: torch.device | str = "cpu",
                 described_by: str = CONFIG_FILE) -> None:
    """Load safetensors ``file`` into ``model``, every tensor present and of the right shape, or raise a
    VaswaniError saying what is wrong (truncated file, or weights of another architecture)."""
    from safetensors.torch import load_model as load_safetensors_into

    try:
        missing, unexpected = load_safetensors_into(model, file, strict=False, device=str(device))
    except RuntimeError as error:  # load_state_dict: shapes differ from the ones model.json builds
        detail = next((line.strip() for line in str(error).splitlines() if "size mismatch" in line), "")
        raise VaswaniError(f"{file}: weights do not match {described_by} ({detail or 'shapes differ'})") from None
    except Exception as error:  # safetensors' own error type: truncated or not a safetensors file
        raise VaswaniError(f"{file}: cannot be read as safetensors weights; the file is truncated or corrupt "
                           f"({str(error).splitlines()[0] if str(error) else type(error).__name__})") from None
    if missing or unexpected:
        # safetensors returns sets: name a few of each, sorted, so the message is the same on every run
        raise VaswaniError(f"{file}: weights do not match {described_by} (missing {sorted(missing)[:3]}, "
                           f"unexpected {sorted(unexpected)[:3]}); the file belongs to another architecture")
