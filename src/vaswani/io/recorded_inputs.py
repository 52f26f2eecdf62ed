"""Corpus files vaswani prepared data from, recorded in the user cache so that no later output overwrites them: the
training files of another run are no input of a `translate`, yet writing over them would change what that run's
corpus.json says it was trained on. One small record per file, named by the sha256 of its resolved path, listing
the prepared-data folders that read it; a record counts only while one of those folders still holds its manifest."""

from __future__ import annotations

import hashlib
import logging
from pathlib import Path
from typing import Iterable

from vaswani.errors import VaswaniError
from vaswani.io.manifests import MANIFEST_FILE
from vaswani.io.paths import default_cache_dir
from vaswani.io.reading import read_json
from vaswani.io.writing import atomic_write_json

logger = logging.getLogger(__name__)

INPUTS_FOLDER = "inputs"  # below the user cache
MAX_READERS = 100  # folders kept per file record, the most recent last


def input_record(path: Path) -> Path:
    """Where the record of the resolved ``path`` lives."""
    return default_cache_dir() / INPUTS_FOLDER / f"{hashlib.sha256(str(path).encode()).hexdigest()}.json"


def record_inputs(paths: Iterable[str | Path], reader: str | Path) -> None:
    """Record each of ``paths`` as a file the folder ``reader`` (prepared data) was made from. A cache that cannot
    be written costs the protection, not the command's work: a warning says so."""
    reader = str(Path(reader).resolve())
    for given in paths:
        path = Path(given).resolve()
        record = input_record(path)
        readers = [folder for folder in _readers(path, record) if folder != reader][-(MAX_READERS - 1):]
        try:
            atomic_write_json(record, {"path": str(path), "readers": [*readers, reader]})
        except (OSError, VaswaniError) as error:
            logger.warning("%s: cannot record %s as a corpus file (%s); a later output may overwrite it", record,
                           path, error)
            return


def prepared_from(path: str | Path) -> Path | None:
    """A folder of prepared data made from the file ``path`` that still holds its manifest; None when none is."""
    resolved = Path(path).resolve()
    for folder in reversed(_readers(resolved, input_record(resolved))):
        if (Path(folder) / MANIFEST_FILE).is_file():
            return Path(folder)
    return None


def _readers(path: Path, record: Path) -> list[str]:
    if not record.is_file():
        return []
    try:
        found = read_json(record, "corpus file record")
    except VaswaniError:  # a damaged record protects nothing; the next prepare of the file writes it again
        return []
    if not isinstance(found, dict) or found.get("path") != str(path) or not isinstance(found.get("readers"), list):
        return []
    return [folder for folder in found["readers"] if isinstance(folder, str)]
