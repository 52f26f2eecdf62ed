"""What a checkpoint says about itself, beside its weights (vaswani.model.serialization): a training checkpoint's
``meta.json`` (the update it holds and, when the run validated those weights, the result), or a final model's
``selection.json`` (how finalize chose it). The server's ``/v1/model`` reports it through :func:`checkpoint_info`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

from vaswani.evaluation.selection import SELECTION_FILE, Selection
from vaswani.records import read_record

META_FILE = "meta.json"


@dataclass
class ValidationExample:
    source: str
    hypothesis: str  # greedy
    reference: str


@dataclass
class ValidationResult:
    """The trainer's validation of its current weights: teacher-forced scores over the whole validation split, per
    real target token, and greedy BLEU on its first ``bleu_sentences`` sentences (None where not measured)."""

    loss: float  # label-smoothed, as optimised
    nll: float  # without smoothing: exp(nll) is the perplexity
    accuracy: float  # argmax predictions equal to the reference token
    tokens: int
    bleu: float | None = None
    bleu_sentences: int | None = None
    example: ValidationExample | None = None  # the first sentence's translation


@dataclass
class CheckpointMeta:
    """A training checkpoint's ``meta.json``."""

    step: int  # optimizer updates the weights have had
    epoch: int
    reason: str  # why it was written: best, eval, periodic, interrupt
    best_metric: float | None  # the run's best early-stopping metric so far (lower is better)
    validation: ValidationResult | None = None  # of these weights, when the run validated them

    @classmethod
    def read(cls, checkpoint_dir: str | Path) -> CheckpointMeta:
        return read_record(cls, Path(checkpoint_dir) / META_FILE)


@dataclass
class CheckpointInfo:
    """What ``/v1/model`` reports of the model it serves; None where the checkpoint does not say."""

    id: str  # RUN/CHECKPOINT inside a run directory, else the directory's name
    step: int | None = None
    weights: str | None = None  # a final model's: which candidate finalize chose
    val_bleu: float | None = None
    val_loss: float | None = None
    val_bleu_on: str | None = None  # which sentences and which search the BLEU was measured with


def checkpoint_info(checkpoint: str | Path) -> CheckpointInfo:
    """What the checkpoint directory's own files say about it. A run's final model (an average of checkpoints, or
    the best one) has no step of its own: its validation score is the one finalize measured on the validation split
    it chose on. A step checkpoint's is the trainer's validation of those weights, when there was one. A damaged
    ``meta.json`` or ``selection.json`` is a VaswaniError naming the file and field."""
    directory = Path(checkpoint).resolve()
    run = directory.parent.parent
    info = CheckpointInfo(f"{run.name}/{directory.name}" if (run / "checkpoints").is_dir() else directory.name)
    if (directory / SELECTION_FILE).is_file():
        selection = Selection.read(directory)
        return dataclasses.replace(info, weights=selection.weights, val_bleu=selection.valid.bleu,
                                   val_bleu_on=f"{selection.valid_sentences} sentences of {selection.valid_split}, "
                                               f"{selection.search}")
    if not (directory / META_FILE).is_file():
        return info
    meta = CheckpointMeta.read(directory)
    info.step = meta.step
    if meta.validation is not None:
        info.val_loss = meta.validation.loss
        if meta.validation.bleu is not None:
            info.val_bleu = meta.validation.bleu
            info.val_bleu_on = f"the first {meta.validation.bleu_sentences} sentences of the validation split, greedy"
    return info


__all__ = ["META_FILE", "CheckpointInfo", "CheckpointMeta", "ValidationExample", "ValidationResult",
           "checkpoint_info"]
