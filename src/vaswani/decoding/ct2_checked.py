"""The record of a full check of a checkpoint and its CTranslate2 conversion, so that a start-up with the same files
skips hashing them again.

Loading the CTranslate2 engine checks the checkpoint (each file's sha256 against its manifest), keys its conversion
(the sha256 of the weights, model.json and tokenizer.json) and checks the conversion (model.bin and the rest against
its manifest): every byte of the weights and of model.bin is read and hashed, which for a large model is most of a
start-up, and gives the answer it gave last time when no file changed. After a full check the engine records each
file it read by its identity (device, inode, size, modification and change times in nanoseconds) beside the
conversion; a later load whose files all still have their recorded identities skips the hashing. Any write to a file
changes its identity (its change time, even when the modification time is set back; its inode when it is
replaced), and a file added to or removed from either directory changes the record's set of files, so a changed,
damaged or replaced file is checked in full again. A file changed less than :data:`SETTLE_SECONDS` before the check
is not recorded (a write within the same tick of the file system's clock would keep its identity): such a check
writes no record, and the next one does.

The record is a cache: one that is missing, unreadable, foreign or cannot be written only means a full check.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from vaswani.errors import VaswaniError
from vaswani.io import MANIFEST_FILE, atomic_write_json, read_json

SETTLE_SECONDS = 2.0
RECORD_FORMAT = 1

Identity = list[int] | None  # None: no such file


def record_path(root: Path, checkpoint: Path, quantization: str) -> Path:
    """Where the record of ``checkpoint``'s check in ``quantization`` is kept in the conversions' folder ``root``
    (which several checkpoints may share, so the name carries the checkpoint's path)."""
    where = hashlib.sha256(str(checkpoint.resolve()).encode()).hexdigest()[:16]
    return root / f"checked-{quantization}-{where}.json"


def file_identities(checkpoint: Path, checkpoint_files: tuple[str, ...], conversion: Path) -> dict[str, Identity]:
    """Each of ``checkpoint_files`` in ``checkpoint`` (with its manifest) and every file in ``conversion``, by path,
    with its identity now."""
    paths = [checkpoint / name for name in (*checkpoint_files, MANIFEST_FILE)]
    if conversion.is_dir():
        paths += sorted(conversion.iterdir())
    return {str(path): _identity(path) for path in paths}


def checked_conversion(roots: list[Path], checkpoint: Path, quantization: str,
                       checkpoint_files: tuple[str, ...]) -> Path | None:
    """The conversion the last full check of ``checkpoint`` in ``quantization`` found whole, when none of the files
    that check read has changed since; None when there is no such record or something changed (check in full)."""
    for root in roots:
        try:
            record = read_json(record_path(root, checkpoint, quantization), "record of a conversion's check")
        except (OSError, VaswaniError):
            continue
        if not isinstance(record, dict) or record.get("format") != RECORD_FORMAT \
                or record.get("checkpoint") != str(checkpoint.resolve()) or record.get("quantization") != quantization \
                or not isinstance(record.get("conversion"), str) or not isinstance(record.get("files"), dict):
            continue
        conversion = Path(record["conversion"])
        if record["files"] == file_identities(checkpoint, checkpoint_files, conversion):
            return conversion
    return None


def record_check(root: Path, checkpoint: Path, quantization: str, conversion: Path,
                 checkpoint_files: tuple[str, ...], started_ns: int) -> None:
    """Record that ``conversion`` and ``checkpoint_files`` were found whole by a check that began at
    ``started_ns`` (time.time_ns()), when none of them changed from :data:`SETTLE_SECONDS` before it on (so the
    check read what is recorded); else, or when ``root`` cannot be written, record nothing."""
    files = file_identities(checkpoint, checkpoint_files, conversion)
    settled = started_ns - int(SETTLE_SECONDS * 1e9)
    if any(identity is not None and max(identity[3], identity[4]) > settled for identity in files.values()):
        return
    record = {"format": RECORD_FORMAT, "checkpoint": str(checkpoint.resolve()), "quantization": quantization,
              "conversion": str(conversion), "files": files}
    try:
        atomic_write_json(record_path(root, checkpoint, quantization), record)
    except OSError:
        pass  # a folder that cannot be written: every load checks in full


def _identity(path: Path) -> Identity:
    try:
        info = os.stat(path)
    except OSError:
        return None
    return [info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns]
