"""Saving and loading model weights: safetensors + the architecture as JSON. Loading never executes code.

A *checkpoint directory* is self-contained for inference::

    model.safetensors   weights (tied matrices stored once)
    model.json          the ModelConfig
    tokenizer.json      the tokenizer the model reads and writes
    vaswani.json        the manifest: "checkpoint", and the size and sha256 of each file (see vaswani.io)

The three files belong together, and the weights say so: their safetensors metadata records the settings of
``model.json`` and the sha256 of ``tokenizer.json`` they were written with (the checkpoint's *fingerprint*). Every
load checks it, so a ``model.json`` edited to other heads or another activation (same shapes, other model), or a
``tokenizer.json`` from another run (same size, other words), is one error naming both files instead of a model that
silently translates differently. The manifest then proves that no file changed since it was written.

A *run directory* holds ``checkpoints/best`` and ``checkpoints/last``; :func:`resolve_checkpoint` accepts either.

Finding a checkpoint and reading its ``model.json`` import no torch (the CTranslate2 engine reads them without it);
torch and safetensors are imported by the functions that save or load weights; the weights' fingerprint is
read from their header alone (safetensors_header.py).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import TYPE_CHECKING

from vaswani.config import ModelConfig
from vaswani.errors import VaswaniError
from vaswani.io import (
    MANIFEST_FILE,
    atomic_copy,
    atomic_write,
    atomic_write_bytes,
    file_sha256,
    read_json,
    read_manifest,
    verify_files,
)
from vaswani.model.safetensors_header import read_header

if TYPE_CHECKING:
    import torch

    from vaswani.model.transformer import Transformer

WEIGHTS_FILE = "model.safetensors"
CONFIG_FILE = "model.json"
TOKENIZER_FILE = "tokenizer.json"
CHECKPOINT_KIND = "checkpoint"
# The fingerprint in the weights' safetensors metadata (a str -> str mapping).
SETTINGS_KEY = "vaswani.model"  # model.json's settings, as canonical JSON
TOKENIZER_KEY = "vaswani.tokenizer"  # sha256 of tokenizer.json's bytes; "" when saved without one
# The files a load reads, checked against the manifest (trainer_state.pt is checked by a resume only).
INFERENCE_FILES = (WEIGHTS_FILE, CONFIG_FILE, TOKENIZER_FILE, "search.json")


def _settings_json(config: ModelConfig) -> str:
    return json.dumps(config.to_dict(), sort_keys=True)


def save_model(model: Transformer, directory: str | Path, tokenizer_file: str | Path | None = None) -> None:
    """Write ``model.safetensors`` and ``model.json`` atomically into ``directory``, with a copy of
    ``tokenizer_file`` as ``tokenizer.json`` when given; the weights record both (the fingerprint that loads check).
    The caller writes the directory's manifest once every file of the checkpoint is in place."""
    from safetensors.torch import save_model as save_safetensors_from

    directory = Path(directory)
    tokenizer_sha256 = ""
    if tokenizer_file is not None:
        tokenizer_sha256 = file_sha256(tokenizer_file)
        if Path(tokenizer_file).resolve() != (directory / TOKENIZER_FILE).resolve():
            atomic_copy(tokenizer_file, directory / TOKENIZER_FILE)
    metadata = {SETTINGS_KEY: _settings_json(model.config), TOKENIZER_KEY: tokenizer_sha256}
    atomic_write(directory / WEIGHTS_FILE, lambda tmp: save_safetensors_from(model, tmp, metadata=metadata))
    atomic_write_bytes(directory / CONFIG_FILE, json.dumps(model.config.to_dict(), indent=2).encode())


def resolve_checkpoint(path: str | Path) -> Path:
    """A checkpoint directory, or a run directory: its ``checkpoints/final`` (the model chosen at the end of the
    run), else ``checkpoints/best``, else ``checkpoints/last``. A directory is a checkpoint because its manifest says
    so (or, without a manifest, because it holds weights and model.json); one whose manifest names another kind (an
    export, an evaluation, a classifier) is refused by name."""
    path = Path(path)
    for candidate in (path, *(path / "checkpoints" / name for name in ("final", "best", "last"))):
        manifest = read_manifest(candidate) if candidate.is_dir() else None
        if manifest is not None and manifest.kind != CHECKPOINT_KIND:
            if candidate == path and manifest.kind != "run":
                raise VaswaniError(f"{path} is {_article(manifest.kind)} {manifest.kind} (see its {MANIFEST_FILE}), "
                                   "not a checkpoint; give a checkpoint directory or a run directory")
            continue
        if manifest is not None or ((candidate / WEIGHTS_FILE).is_file() and (candidate / CONFIG_FILE).is_file()):
            return candidate
    raise VaswaniError(
        f"{path}: no checkpoint found (expected {WEIGHTS_FILE} + {CONFIG_FILE} in it or in checkpoints/final|best|last)"
    )


def _article(word: str) -> str:
    return "an" if word[:1] in "aeiou" else "a"


def load_model(path: str | Path, device: torch.device | str = "cpu") -> Transformer:
    """Build the model from ``model.json`` and load its weights from safetensors (no pickle anywhere), after
    checking that the checkpoint's files belong together and are as they were written (:func:`check_checkpoint`)."""
    from vaswani.model.transformer import Transformer  # torch: not for reading or checking a checkpoint's files

    directory = resolve_checkpoint(path)
    config = check_checkpoint(directory)
    model = Transformer(config)
    load_weights(model, directory / WEIGHTS_FILE, device)
    return model.to(device)


def check_checkpoint(directory: str | Path, files: tuple[str, ...] = INFERENCE_FILES) -> ModelConfig:
    """Check a checkpoint directory before anything is built from it, and return its ModelConfig: the weights'
    fingerprint against ``model.json`` and ``tokenizer.json``, then each of ``files`` against the manifest. Any
    mismatch is a VaswaniError naming the files that disagree."""
    directory = Path(directory)
    config = read_model_config(directory / CONFIG_FILE)
    recorded = weights_metadata(directory / WEIGHTS_FILE)
    if recorded.get(SETTINGS_KEY):
        written = _recorded_settings(directory / WEIGHTS_FILE, recorded[SETTINGS_KEY])
        if written != config:
            changed = [f"{f.name}={getattr(config, f.name)!r} (weights: {getattr(written, f.name)!r})"
                       for f in dataclasses.fields(ModelConfig) if getattr(config, f.name) != getattr(written, f.name)]
            raise VaswaniError(f"{directory / CONFIG_FILE} does not match {directory / WEIGHTS_FILE}: "
                               f"{', '.join(changed)}; the weights were written for other settings, so restore the "
                               "checkpoint's own model.json")
    tokenizer = directory / TOKENIZER_FILE
    if recorded.get(TOKENIZER_KEY) and tokenizer.is_file():
        actual = file_sha256(tokenizer)
        if actual != recorded[TOKENIZER_KEY]:
            raise VaswaniError(f"{tokenizer} does not match {directory / WEIGHTS_FILE}: the weights were trained with "
                               f"tokenizer {recorded[TOKENIZER_KEY][:12]}, this file is {actual[:12]}; put back the "
                               "checkpoint's own tokenizer.json")
    manifest = read_manifest(directory)
    if manifest is not None:
        verify_files(directory, manifest, files)
    return config


def weights_metadata(file: Path) -> dict[str, str]:
    """The safetensors metadata of ``file`` (its header only: cheap for any size, and no numpy or torch); a
    file that is not safetensors is a VaswaniError naming it."""
    try:
        return read_header(file).metadata
    except FileNotFoundError:
        raise VaswaniError(f"{file}: not found; the checkpoint is incomplete") from None
    except (OSError, ValueError) as error:  # truncated, not a safetensors file, or no file at all
        raise VaswaniError(f"{file}: cannot be read as safetensors weights; the file is truncated or corrupt "
                           f"({_first_line(error)})") from None


def _recorded_settings(file: Path, text: str) -> ModelConfig:
    try:
        values = json.loads(text)
        return ModelConfig.from_dict(values)
    except (ValueError, TypeError, RecursionError, VaswaniError):
        raise VaswaniError(f"{file}: the settings recorded in its metadata are damaged; the file is corrupt") from None


def read_model_config(file: Path) -> ModelConfig:
    """The ModelConfig in ``model.json``; any fault in the file is a VaswaniError that names it."""
    values = read_json(file, "model description")
    try:
        return ModelConfig.from_dict(values)
    except VaswaniError as error:
        raise VaswaniError(f"{file}: {error}") from None
    except TypeError as error:  # a value of a type no setting takes (a list, an object)
        raise VaswaniError(f"{file}: {error}") from None


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
                           f"({_first_line(error)})") from None
    if missing or unexpected:
        # safetensors returns sets: name a few of each, sorted, so the message is the same on every run
        raise VaswaniError(f"{file}: weights do not match {described_by} (missing {sorted(missing)[:3]}, "
                           f"unexpected {sorted(unexpected)[:3]}); the file belongs to another architecture")


def _first_line(error: BaseException) -> str:
    return str(error).splitlines()[0] if str(error) else type(error).__name__

