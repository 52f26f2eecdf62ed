"""Training checkpoints: everything needed to continue a run bit-exactly, written so a crash never corrupts one.

Layout of a run directory::

    checkpoints/step_000600/   model.safetensors, model.json, tokenizer.json, trainer_state.pt, meta.json,
                               vaswani.json (the manifest: "checkpoint", each file's size and sha256)
    checkpoints/last -> step_000600     (symlinks, swapped atomically)
    checkpoints/best -> step_000400

A checkpoint directory is assembled under a temporary name, its manifest written last, every file fsynced, and
then renamed into place; only after that does ``last`` move. A resume checks every file against the manifest and
the weights' fingerprint (see vaswani.model.serialization) before it reads the trainer state. A process killed at
any instant leaves every ``step_*`` directory complete, and :func:`latest_checkpoint` finds the newest one even if
``last`` was left dangling. ``trainer_state.pt`` holds only tensors and plain containers and is read with
``torch.load(weights_only=True)``, which refuses to execute code.
"""

from __future__ import annotations

import dataclasses
import os
import pickle
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from vaswani.errors import VaswaniError
from vaswani.evaluation.checkpoint_info import META_FILE, CheckpointMeta
from vaswani.io import (
    atomic_symlink,
    install_directory,
    read_manifest,
    staging_directory,
    staging_reported_as,
    write_faults_named,
    write_manifest,
)
from vaswani.model import Transformer
from vaswani.model.serialization import CHECKPOINT_KIND, check_checkpoint, resolve_checkpoint, save_model
from vaswani.records import write_record

STATE_FILE = "trainer_state.pt"
CHECKPOINT_FILES = ("model.safetensors", "model.json", "tokenizer.json", STATE_FILE, META_FILE)
STEP_NAME = re.compile(r"(?:\.replaced-)?step_(\d+)$")


@dataclass(frozen=True)
class TrainerState:
    """A checkpoint's ``trainer_state.pt``: the optimizer, schedule and gradient-scaler states, the run's progress
    (training/resume.py ``Progress``, as a mapping), the random number generators and the run's config as YAML.
    The file holds these fields as one mapping of tensors and plain containers, so loading it never executes code."""

    optimizer: dict[str, Any]
    scheduler: dict[str, Any]
    scaler: dict[str, Any]
    progress: dict[str, Any]
    rng: dict[str, Any]
    config_yaml: str


def save_checkpoint(
    checkpoints_dir: Path,
    name: str,
    model: Transformer,
    tokenizer_file: Path,
    state: TrainerState,
    meta: CheckpointMeta,
) -> Path:
    """Write checkpoint ``name`` (e.g. ``step_000600``) with the trainer state ``state`` (resume.trainer_state) and
    ``meta`` as its meta.json, atomically, and return its directory. Its manifest is
    written last, so a directory with one is complete. A write the machine refuses (a full disk) is one
    EnvironmentFault naming the file, and leaves no staging directory behind."""
    final = checkpoints_dir / name
    staging = staging_directory(final, name=f".tmp-{name}-{os.getpid()}")
    try:
        with staging_reported_as(staging, final), write_faults_named(staging):
            with write_faults_named(staging / STATE_FILE):
                # the fields themselves, not a copy: dataclasses.asdict would copy every tensor of the optimizer
                torch.save({field.name: getattr(state, field.name) for field in dataclasses.fields(state)},
                           staging / STATE_FILE)
            write_record(staging / META_FILE, meta)
            save_model(model, staging, tokenizer_file)
            write_manifest(staging, CHECKPOINT_KIND, {"step": meta.step})
        with write_faults_named(final):
            # Re-saving the same step (an evaluation right after a periodic save, an interrupt) moves the old one
            # aside by a rename, never deletes it in place: `last` may point to it, and until the new one is in
            # place latest_checkpoint() still finds it as .replaced-NAME.
            install_directory(staging, final, aside=checkpoints_dir / f".replaced-{name}")
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return final


def point_link_at(checkpoints_dir: Path, link: str, target: Path) -> None:
    """Atomically make ``checkpoints/<link>`` a relative symlink to ``target``."""
    atomic_symlink(checkpoints_dir / link, target.name)


def prune(checkpoints_dir: Path, keep: int, around_best: int = 0) -> None:
    """Delete the oldest ``step_*`` directories beyond ``keep``, never the ones ``best``/``last`` point to, nor the
    ``around_best`` step checkpoints nearest the best (the best among them): where the validation loss is lowest
    early and rises after, the run's final model can then be an average of the region around its best, which the
    last ``keep`` have long left (training/finalize.py)."""
    protected = {(checkpoints_dir / link).resolve() for link in ("best", "last") if (checkpoints_dir / link).exists()}
    steps = sorted(p for p in checkpoints_dir.glob("step_*") if p.is_dir())
    best = checkpoints_dir / "best"
    if around_best and best.exists():
        protected.update(p.resolve() for p in nearest(steps, best.resolve(), around_best))
    for old in steps[: max(len(steps) - keep, 0)]:
        if old.resolve() not in protected:
            shutil.rmtree(old, ignore_errors=True)
    for stale in [*checkpoints_dir.glob(".tmp-*"), *checkpoints_dir.glob(".replaced-*")]:  # a kill mid-save
        shutil.rmtree(stale, ignore_errors=True)


def nearest(steps: list[Path], center: Path, n: int) -> list[Path]:
    """The ``n`` of ``steps`` (step order) nearest ``center`` in that order, ``center`` among them, in step order;
    ties go to the later one."""
    resolved = [p.resolve() for p in steps]
    if center not in resolved:
        return []
    index = resolved.index(center)
    order = sorted(range(len(steps)), key=lambda i: (abs(i - index), -i))
    return [steps[i] for i in sorted(order[:n])]


def is_complete(directory: Path) -> bool:
    """Is ``directory`` a whole resumable checkpoint: its manifest (written last) says "checkpoint" and lists every
    file a resume reads? Without a manifest, every one of those files must be there."""
    if not directory.is_dir():
        return False
    try:
        manifest = read_manifest(directory)
    except VaswaniError:
        return False
    if manifest is not None:
        return manifest.kind == CHECKPOINT_KIND and set(CHECKPOINT_FILES) <= set(manifest.files)
    return all((directory / name).is_file() for name in CHECKPOINT_FILES)


def latest_checkpoint(checkpoints_dir: Path) -> Path | None:
    """The checkpoint a resume continues from: ``last`` when it points at a complete checkpoint, else the
    highest-step complete ``step_*`` (a run killed between two renames may leave ``last`` dangling)."""
    last = checkpoints_dir / "last"
    if last.is_symlink() and is_complete(last):
        return last.resolve()
    candidates = []
    for directory in checkpoints_dir.glob("*step_*") if checkpoints_dir.is_dir() else ():
        match = STEP_NAME.match(directory.name)
        if match and is_complete(directory):
            candidates.append((int(match.group(1)), not directory.name.startswith("."), directory))
    return max(candidates)[2] if candidates else None


def load_trainer_state(path: str | Path) -> tuple[Path, TrainerState]:
    """The checkpoint directory and its trainer state; ``path`` may be a run dir (uses ``last``) or a checkpoint."""
    path = Path(path)
    latest = latest_checkpoint(path / "checkpoints")
    directory = resolve_checkpoint(latest if latest is not None else path)
    state_file = directory / STATE_FILE
    if not state_file.is_file():
        raise VaswaniError(f"{directory}: no {STATE_FILE}; this checkpoint holds weights only and cannot be resumed")
    check_checkpoint(directory, CHECKPOINT_FILES)  # the files belong together and are as they were written
    try:
        state = torch.load(state_file, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as error:
        if "weights_only" in str(error):
            # torch's own message suggests weights_only=False, i.e. running whatever the file contains: never.
            raise VaswaniError(f"{state_file}: refused: it holds objects other than tensors and plain containers, "
                               "and loading those could run code; it was not written by vaswani") from None
        raise VaswaniError(f"{state_file}: cannot be read as a trainer state (corrupt, or not a torch file)") from None
    except Exception as error:  # a truncated or foreign file: say which, not a pickle traceback
        reason = str(error).splitlines()[0] if str(error) else type(error).__name__
        raise VaswaniError(f"{state_file}: cannot be read as a trainer state ({reason})") from None
    names = [field.name for field in dataclasses.fields(TrainerState)]
    if not isinstance(state, dict) or not set(names) <= set(state):
        raise VaswaniError(f"{state_file}: not a vaswani trainer state (keys missing)")
    return directory, TrainerState(**{name: state[name] for name in names})
