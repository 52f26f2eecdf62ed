"""Checkpoint averaging: the element-wise mean of the weights of the last N checkpoints of one run.

Vaswani et al. (§6.1) average the last 5 (base) or 20 (big) checkpoints: the mean of points along the end of the
optimisation trajectory sits nearer the centre of the basin than any one of them, which usually gains a little
BLEU for free. Only checkpoints of the same architecture (identical model.json) can be averaged.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Sequence

import torch

from vaswani.errors import VaswaniError
from vaswani.io import atomic_write_json, directory_written_whole
from vaswani.model.serialization import (
    CHECKPOINT_KIND,
    CONFIG_FILE,
    TOKENIZER_FILE,
    load_model,
    read_model_config,
    resolve_checkpoint,
    save_model,
)

STEP_DIR = re.compile(r"step_(\d+)$")


def last_checkpoints(run_dir: str | Path, n: int) -> list[Path]:
    """The ``n`` highest-step ``RUN/checkpoints/step_*`` directories, oldest first."""
    root = Path(run_dir) / "checkpoints"
    steps = sorted(
        ((int(m.group(1)), p) for p in root.glob("step_*") if p.is_dir() and (m := STEP_DIR.search(p.name))),
    )
    if n < 1:
        raise VaswaniError(f"--last must be >= 1, got {n}")
    if len(steps) < n:
        raise VaswaniError(f"{root}: {len(steps)} step_* checkpoint(s) found, --last {n} asks for {n}")
    return [path for _, path in steps[-n:]]


def average_checkpoints(checkpoints: Sequence[str | Path], out: str | Path) -> Path:
    """Average the weights of ``checkpoints`` into a new checkpoint directory ``out`` (weights, model.json and
    the tokenizer of the last one), which replaces ``out`` whole if it exists. Returns ``out``.

    Parameters are accumulated in float64 and visited once each (``named_parameters`` lists a tied matrix
    once), so tied embeddings stay one tensor in the average as they were in every input.
    """
    if not checkpoints:
        raise VaswaniError("no checkpoints to average")
    directories = [resolve_checkpoint(path) for path in checkpoints]
    out = Path(out)
    if any(out.resolve() == d.resolve() for d in directories):
        raise VaswaniError(f"{out}: the output would overwrite one of the checkpoints being averaged")
    _check_same_setup(directories)

    model = load_model(directories[0])
    params = dict(model.named_parameters())
    total = {name: p.detach().double().clone() for name, p in params.items()}
    for directory in directories[1:]:
        for name, p in load_model(directory).named_parameters():
            total[name] += p.detach().double()
    with torch.no_grad():
        for name, p in params.items():
            p.copy_((total[name] / len(directories)).to(p.dtype))

    # Written whole: an existing ``out`` is replaced only by a complete checkpoint, never mixed with its files.
    tokenizer = directories[-1] / TOKENIZER_FILE
    with directory_written_whole(out, kind=CHECKPOINT_KIND, writer="average") as staging:
        save_model(model, staging, tokenizer if tokenizer.is_file() else None)
        atomic_write_json(staging / "average.json", {"averaged": [str(d) for d in directories]})
    return out


def _check_same_setup(directories: list[Path]) -> None:
    """Averaging weights of different shapes, or of models reading different vocabularies, is meaningless."""
    first = directories[0]
    config = read_model_config(first / CONFIG_FILE)
    tokenizer = (first / TOKENIZER_FILE).read_bytes() if (first / TOKENIZER_FILE).is_file() else None
    for other in directories[1:]:
        if read_model_config(other / CONFIG_FILE) != config:
            raise VaswaniError(f"{other / CONFIG_FILE}: architecture differs from {first / CONFIG_FILE}")
        other_tokenizer = (other / TOKENIZER_FILE).read_bytes() if (other / TOKENIZER_FILE).is_file() else None
        if other_tokenizer != tokenizer:
            raise VaswaniError(f"{other / TOKENIZER_FILE}: differs from {first / TOKENIZER_FILE}")
