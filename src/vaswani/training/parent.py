"""Fine-tuning: a new run that starts from the weights of another (its *parent*) instead of a random draw.

``vaswani train --init-from PARENT`` (``train.init_from``) takes a run directory (its final model, else best,
else last), one of its checkpoints, or a final model. The new run trains on its own data with its own schedule
and a fresh optimizer; the parent's files are only read. What the weights mean comes with them: the model's
settings (only dropout and the attention backend, which change no weight, may differ) and the tokenizer, which
prepares the new corpus, so that a token id means the same word in both runs. ``train.freeze`` keeps part of
the model as the parent left it. The parent's checkpoint and the sha256 of its weights and manifest are
recorded in the run's ``provenance.jsonl``.

A resumed fine-tuned run continues from its own checkpoints and reads nothing of the parent.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import torch
import torch.nn as nn

from vaswani.config import ModelConfig
from vaswani.data.tokenizer import Tokenizer
from vaswani.errors import ConfigError, VaswaniError
from vaswani.io import MANIFEST_FILE, file_sha256
from vaswani.model import Transformer
from vaswani.model.serialization import (
    TOKENIZER_FILE,
    WEIGHTS_FILE,
    check_checkpoint,
    load_weights,
    resolve_checkpoint,
)
from vaswani.settings import apply_overrides, parse_settings
from vaswani.training.checkpoint import latest_checkpoint
from vaswani.training.config import RunConfig

# Model settings a fine-tuned run may set otherwise than its parent: they change no weight and no computation
# the weights were trained for (regularisation, and which kernel computes attention).
TUNABLE_MODEL_SETTINGS = ("dropout", "attention_dropout", "attention")
# The model settings the trainer takes from the tokenizer.
SET_BY_THE_TOKENIZER = ("vocab_size", "pad_id")
FREEZABLE = ("none", "embeddings", "encoder")


@dataclass(frozen=True)
class Parent:
    """The checkpoint a run starts from, checked, and what identifies it."""

    checkpoint: Path  # the checkpoint directory, resolved
    model: ModelConfig
    weights_sha256: str
    manifest_sha256: str | None  # None: a checkpoint written without a manifest

    @property
    def tokenizer_file(self) -> Path:
        return self.checkpoint / TOKENIZER_FILE

    def record(self) -> dict[str, str | None]:
        """What the run's provenance says of its parent."""
        return {"checkpoint": str(self.checkpoint), "weights_sha256": self.weights_sha256,
                "manifest_sha256": self.manifest_sha256}


def find_parent(path: str | Path) -> Parent:
    """The checkpoint ``path`` names (a run directory, a checkpoint, a final model), its files checked against
    its manifest and the weights' fingerprint. A missing path, another kind of directory (a classifier, an
    export) or a damaged checkpoint is one VaswaniError naming it."""
    given = Path(path)
    if not given.exists():
        raise VaswaniError(f"{given}: no such run directory or checkpoint to initialise from")
    directory = resolve_checkpoint(given).resolve()
    if not (directory / TOKENIZER_FILE).is_file():
        raise VaswaniError(f"{directory}: no {TOKENIZER_FILE}; a run initialised from a checkpoint prepares "
                           "its data with the checkpoint's tokenizer, so it needs one")
    model = check_checkpoint(directory)
    manifest = directory / MANIFEST_FILE
    return Parent(directory, model, file_sha256(directory / WEIGHTS_FILE),
                  file_sha256(manifest) if manifest.is_file() else None)


def fine_tune_config(config: RunConfig, parent: Parent, settings: Sequence[str] = ()) -> RunConfig:
    """``config`` as a run initialised from ``parent``: the parent's model (changed only by ``settings``'
    ``model.*`` items that change no weight; any other is refused, naming it), its vocabulary size, and
    ``train.init_from`` set to the parent's checkpoint directory. A run fitting its model to the clock
    (``train.scale_up_models``) has no model left to choose."""
    asked = parse_settings(list(settings), ("model", "data", "train"))["model"]
    model = apply_overrides(parent.model, asked, "model")
    check_same_model(model, parent)
    tags = [tag for tag in config.data.train_tags if tag]
    if tags:  # the data is prepared with the parent's tokenizer: a tag must be one of its special tokens
        tokenizer = Tokenizer.load(parent.tokenizer_file)
        for tag in tags:
            tokenizer.tag_id(tag)
    data = dataclasses.replace(config.data, vocab_size=parent.model.vocab_size)
    train = dataclasses.replace(config.train, init_from=str(parent.checkpoint), scale_up_models=())
    return RunConfig(model=model, data=data, train=train)


def check_same_model(model: ModelConfig, parent: Parent) -> None:
    """Refuse a model that differs from the parent's in a setting its weights depend on, naming the first."""
    for field in dataclasses.fields(ModelConfig):
        name = field.name
        if name in TUNABLE_MODEL_SETTINGS or name in SET_BY_THE_TOKENIZER:
            continue
        run_value, parent_value = getattr(model, name), getattr(parent.model, name)
        if run_value != parent_value:
            raise ConfigError(f"model.{name}={run_value!r}: a run initialised from {parent.checkpoint} keeps that "
                              f"model ({name}={parent_value!r} in its model.json); leave the setting out (only "
                              f"{', '.join(TUNABLE_MODEL_SETTINGS)} may change)", field=f"model.{name}")


def parent_of(config: RunConfig, resuming: bool) -> Parent | None:
    """The parent a new fine-tuned run starts from (checked again: it may have changed since the config was
    made); None for a run trained from scratch, or one resumed from its own checkpoints."""
    if config.train.init_from is None or resuming:
        return None
    parent = find_parent(config.train.init_from)
    check_same_model(config.model, parent)
    return parent


def run_tokenizer(config: RunConfig, run_dir: Path, parent: Parent | None) -> Path | None:
    """The tokenizer a fine-tuned run prepares its data with: its parent's when it starts, its own
    checkpoints' once it has some (the same file: the run copies it). None for a run trained from scratch:
    the data's own."""
    if config.train.init_from is None:
        return None
    if parent is not None:
        return parent.tokenizer_file
    latest = latest_checkpoint(run_dir / "checkpoints")
    if latest is not None:
        return latest / TOKENIZER_FILE
    if (run_dir / TOKENIZER_FILE).is_file():
        return run_dir / TOKENIZER_FILE
    raise VaswaniError(f"{run_dir}: a run initialised from {config.train.init_from}, but it holds neither "
                       f"its {TOKENIZER_FILE} nor a checkpoint; start it again with --start-over")


def initial_model(config: ModelConfig, parent: Parent | None, frozen: str,
                  device: torch.device) -> Transformer:
    """The model a run starts with on ``device``: drawn from torch's generator, or the parent's weights, with
    the ``frozen`` part (``train.freeze``) left out of training."""
    model = Transformer(config).to(device)
    if parent is not None:
        load_weights(model, parent.checkpoint / WEIGHTS_FILE, device)
    freeze(model, frozen)
    return model


def freeze(model: nn.Module, part: str) -> list[str]:
    """Stop training ``part`` of ``model`` and return the names of the parameters frozen.

    ``embeddings``: every embedding table (tokens, learned positions), and the output projection where it is
    tied to them. ``encoder``: every parameter of the encoder that the decoder does not share (with tied
    embeddings the token embedding is shared, and trains on)."""
    if part == "none":
        return []
    if part == "embeddings":
        tables = {id(module.weight) for module in model.modules() if isinstance(module, nn.Embedding)}
        chosen = [(name, p) for name, p in model.named_parameters() if id(p) in tables]
    elif part == "encoder":
        shared = {id(p) for name, p in model.named_parameters(remove_duplicate=False)
                  if not name.startswith("encoder.")}
        chosen = [(name, p) for name, p in model.encoder.named_parameters(prefix="encoder")
                  if id(p) not in shared]
    else:
        raise ConfigError(f"train.freeze={part!r}: expected one of {', '.join(FREEZABLE)}",
                          field="train.freeze")
    for _, parameter in chosen:
        parameter.requires_grad_(False)
    return [name for name, _ in chosen]


__all__ = ["FREEZABLE", "Parent", "TUNABLE_MODEL_SETTINGS", "check_same_model", "find_parent",
           "fine_tune_config", "freeze", "initial_model", "parent_of", "run_tokenizer"]
