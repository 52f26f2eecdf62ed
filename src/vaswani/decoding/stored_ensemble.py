"""A checkpoint that is an ensemble: its ``ensemble.json`` names member checkpoints inside it (``ensemble/0``,
``ensemble/1``, …) and their weights, and :meth:`vaswani.decoding.Translator.load` then searches the members as one
model (ensemble.py), on the torch engine. The end of a training run writes one when an ensemble of its last
checkpoints translates its validation split best (``train.final_ensembles``). The checkpoint's own weights stay
one model's, for what runs a single model (CTranslate2, ``vaswani score``, export). No torch here: the command
line reads it before choosing an engine.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Sequence

from vaswani.data.languages import recorded_languages
from vaswani.errors import VaswaniError
from vaswani.io import atomic_write_json, read_json, read_manifest, verify_files
from vaswani.model.serialization import TOKENIZER_FILE

ENSEMBLE_FILE = "ensemble.json"
MEMBERS_FOLDER = "ensemble"


@dataclass(frozen=True)
class StoredEnsemble:
    """The members of an ensemble checkpoint (checkpoint directories inside it) and their weights."""

    members: list[Path]
    weights: list[float]


def member_name(index: int) -> str:
    """Where member ``index`` lives inside the ensemble checkpoint: ``ensemble/<index>``."""
    return f"{MEMBERS_FOLDER}/{index}"


def write_stored_ensemble(directory: str | Path, weights: Sequence[float]) -> None:
    """Record that the checkpoint in ``directory`` is the ensemble of its ``ensemble/0`` … ``ensemble/<n-1>``
    checkpoints (already written there), weighted by ``weights`` (one per member)."""
    atomic_write_json(Path(directory) / ENSEMBLE_FILE, {"members": [member_name(i) for i in range(len(weights))],
                                                        "weights": [float(weight) for weight in weights]})


def read_stored_ensemble(directory: str | Path) -> StoredEnsemble | None:
    """The ensemble the checkpoint in ``directory`` is, or None for a single model. A damaged ``ensemble.json``
    (a member outside the checkpoint or missing, weights that are not one positive number per member) is a
    VaswaniError naming it."""
    directory = Path(directory)
    file = directory / ENSEMBLE_FILE
    if not file.is_file():
        return None
    manifest = read_manifest(directory)
    if manifest is not None:  # checked before it is parsed
        verify_files(directory, manifest, [ENSEMBLE_FILE])
    values = read_json(file, "stored ensemble")
    members, weights = (values.get("members"), values.get("weights")) if isinstance(values, dict) else (None, None)
    if not isinstance(members, list) or len(members) < 2 or not all(isinstance(m, str) for m in members):
        raise VaswaniError(f"{file}: expected \"members\", a list of two or more checkpoint folders inside "
                           f"{directory}; it is damaged: finalize the run again")
    if not isinstance(weights, list) or len(weights) != len(members) or not all(
            isinstance(w, (int, float)) and not isinstance(w, bool) and 0 < w < math.inf for w in weights):
        raise VaswaniError(f"{file}: expected \"weights\", one positive number per member; it is damaged: "
                           "finalize the run again")
    paths = []
    for member in members:
        relative = PurePosixPath(member)
        if relative.is_absolute() or ".." in relative.parts or not relative.parts:
            raise VaswaniError(f"{file}: member {member!r} is not a folder inside {directory}")
        if not (directory / relative).is_dir():
            raise VaswaniError(f"{file}: member {member!r} is missing from {directory}; the checkpoint is "
                               "incomplete: finalize the run again")
        paths.append(directory / relative)
    return StoredEnsemble(paths, [float(weight) for weight in weights])


def check_ensemble_members(directories: Sequence[Path]) -> None:
    """Refuse, in one line naming the checkpoint, members that cannot be searched as one: the first without a
    tokenizer, a member that is an ensemble itself, a tokenizer other than the first's, another direction."""
    first = directories[0]
    if not (first / TOKENIZER_FILE).is_file():
        raise VaswaniError(f"{first}: no {TOKENIZER_FILE} beside the weights; cannot turn text into ids")
    for index, directory in enumerate(directories):
        if (directory / ENSEMBLE_FILE).is_file():
            raise VaswaniError(f"{directory} is an ensemble itself ({ENSEMBLE_FILE}): give its members "
                               "(its ensemble/N folders) as checkpoints instead")
        if index == 0:
            continue
        if not (directory / TOKENIZER_FILE).is_file() or \
                (directory / TOKENIZER_FILE).read_bytes() != (first / TOKENIZER_FILE).read_bytes():
            raise VaswaniError(f"{directory}: its {TOKENIZER_FILE} is not {first}'s; an ensemble's "
                               "models must share one tokenizer (train them on the same prepared data)")
        pair, other = recorded_languages(first), recorded_languages(directory)
        if pair is not None and other is not None and pair != other:
            raise VaswaniError(f"{directory} translates {other.source}-{other.target}, {first} "
                               f"{pair.source}-{pair.target}: an ensemble's models share one direction")
