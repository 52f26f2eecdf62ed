"""What a directory is, by what the tool wrote: a manifest of each file's size and sha256 written last, checked at
load; and the folders written whole with one."""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

from vaswani.errors import VaswaniError
from vaswani.io.reading import JsonObject, read_json
from vaswani.io.writing import (
    atomic_write_json,
    fsync_directory,
    fsync_file,
    install_directory,
    staging_directory,
    staging_reported_as,
    write_faults_named,
)


@contextlib.contextmanager
def directory_written_whole(out: str | Path, kind: str | None = None, details: JsonObject | None = None,
                            writer: str | None = None, keep: Callable[[Path], bool] | None = None) -> Iterator[Path]:
    """Yield an empty staging directory beside ``out``; when the block succeeds it takes ``out``'s place, and an
    existing ``out`` is deleted only after that. With ``kind``, the manifest (see :func:`write_manifest`) is written
    into it last, naming the command (``writer``). A failure (or a kill) never leaves a half-written ``out`` and never
    loses the old one: what can remain is a hidden ``.NAME.*`` directory beside it. ``keep``: as in
    :func:`install_directory`, an ``out`` another process installed meanwhile is kept when ``keep(out)`` says it is
    whole."""
    out = Path(out)
    staging = staging_directory(out)
    try:
        with staging_reported_as(staging, out):
            yield staging
        with write_faults_named(out):
            if kind is not None:
                write_manifest(staging, kind, details, writer=writer)
            install_directory(staging, out, keep=keep)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


@contextlib.contextmanager
def files_written_together(directory: str | Path, kind: str | None = None,
                           details: JsonObject | None = None) -> Iterator[Path]:
    """Yield an empty staging directory inside ``directory`` (which may hold other things, e.g. other experiments'
    folders); when the block succeeds, each file written there is renamed into ``directory``, the manifest (with
    ``kind``) last. Every byte is written before the first file moves, so a full disk or a failure leaves the earlier
    files, never a mix of new and old ones; renames within a directory need no space."""
    directory = Path(directory)
    with write_faults_named(directory):
        directory.mkdir(parents=True, exist_ok=True)
    staging = staging_directory(directory / "staging")  # .staging.XXXXXXXX inside it
    try:
        with staging_reported_as(staging, directory):
            yield staging
        with write_faults_named(directory):
            if kind is not None:
                write_manifest(staging, kind, details)
            names = sorted(p.name for p in staging.iterdir() if p.name != MANIFEST_FILE)
            for name in names:
                fsync_file(staging / name)
            for name in [*names, *([MANIFEST_FILE] if kind is not None else [])]:
                os.replace(staging / name, directory / name)
            fsync_directory(directory)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


MANIFEST_FILE = "vaswani.json"


MANIFEST_FORMAT = 1


HASH_CHUNK = 1 << 20


@dataclass
class Manifest:
    """What a directory is (``kind``: run, checkpoint, evaluation, comparison, export, classifier, ...) and the
    bytes and sha256 of each file it was written with (a run directory, which grows, lists none)."""

    kind: str
    files: dict[str, dict[str, Any]] = field(default_factory=dict)
    details: JsonObject = field(default_factory=dict)
    writer: str | None = None  # the command that wrote it, where several write the same kind (a checkpoint)


def bytes_sha256(data: bytes) -> str:
    """The sha256 of ``data``, in hex."""
    return hashlib.sha256(data).hexdigest()


def file_sha256(path: str | Path) -> str:
    """The sha256 of ``path``'s bytes, in hex, read a chunk at a time. Remembered for the process by the file's
    identity and times (device, inode, size, modification and change time, in nanoseconds), so a load that checks a
    checkpoint and then keys its conversion reads the weights once; any write changes that identity."""
    info = os.stat(path)
    identity = (info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns)
    known = _HASHED.get(identity)
    if known is not None:
        return known
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(HASH_CHUNK):
            digest.update(chunk)
    _HASHED[identity] = digest.hexdigest()
    return _HASHED[identity]


_HASHED: dict[tuple[int, ...], str] = {}


def files_sha256(directory: str | Path, names: Iterable[str]) -> str:
    """One sha256 over the files ``names`` in ``directory``, each as its name, its size and its sha256: equal files,
    equal key (the key of what a derived output, such as a conversion, was made from)."""
    lines = [f"{name}\0{(Path(directory) / name).stat().st_size}\0{file_sha256(Path(directory) / name)}\n"
             for name in names]
    return bytes_sha256("".join(lines).encode())


def write_manifest(directory: str | Path, kind: str, details: JsonObject | None = None,
                   files: Iterable[str] | None = None, writer: str | None = None) -> Manifest:
    """Write ``directory``'s manifest: its ``kind``, the command that wrote it (``writer``), ``details``, and the
    size and sha256 of ``files`` (default: every visible regular file directly in it). Written last, atomically: a
    directory with a manifest is complete."""
    directory = Path(directory)
    names = sorted(files) if files is not None else sorted(
        p.name for p in directory.iterdir() if p.is_file() and not p.is_symlink() and not p.name.startswith(".")
        and p.name != MANIFEST_FILE)
    listed = {name: {"bytes": (directory / name).stat().st_size, "sha256": file_sha256(directory / name)}
              for name in names}
    manifest = Manifest(kind, listed, dict(details or {}), writer)
    atomic_write_json(directory / MANIFEST_FILE, {"kind": kind, "format": MANIFEST_FORMAT, "files": listed,
                                                  "details": manifest.details,
                                                  **({"writer": writer} if writer is not None else {})})
    return manifest


def read_manifest(directory: str | Path) -> Manifest | None:
    """``directory``'s manifest, or None when it has none; a damaged one is a VaswaniError naming it."""
    path = Path(directory) / MANIFEST_FILE
    if not path.is_file():
        return None
    values = read_json(path, "directory manifest")
    problem = _manifest_problem(values)
    if problem:
        raise VaswaniError(f"{path}: not a vaswani manifest ({problem}); it is damaged or was not written by vaswani")
    return Manifest(values["kind"], values["files"], values.get("details") or {}, values.get("writer"))


def _manifest_problem(values: Any) -> str | None:
    if not isinstance(values, dict):
        return "not a JSON object"
    if values.get("format") != MANIFEST_FORMAT:
        return f"format {values.get('format')!r} is not {MANIFEST_FORMAT}"
    if not isinstance(values.get("kind"), str):
        return 'no "kind"'
    files = values.get("files")
    if not isinstance(files, dict):
        return 'no "files" object'
    for name, entry in files.items():
        if "/" in name or name in ("", ".", "..") or not isinstance(entry, dict):
            return f"bad entry {name!r}"
        size, digest = entry.get("bytes"), entry.get("sha256")
        if not isinstance(size, int) or isinstance(size, bool) or size < 0 or not isinstance(digest, str):
            return f"bad entry {name!r}"
    if not isinstance(values.get("details", {}), dict):
        return '"details" is not an object'
    if not isinstance(values.get("writer", ""), str):
        return '"writer" is not a string'
    return None


def directory_kind(directory: str | Path) -> str | None:
    """The kind ``directory``'s manifest names, or None (no manifest, or a damaged one)."""
    try:
        manifest = read_manifest(directory)
    except VaswaniError:
        return None
    return manifest.kind if manifest is not None else None


def verify_files(directory: str | Path, manifest: Manifest, names: Iterable[str] | None = None) -> None:
    """Check that the files the manifest lists (or ``names`` among them) are there with the bytes they were written
    with; a missing, resized or changed file is a VaswaniError naming it and the manifest."""
    directory = Path(directory)
    for name in manifest.files if names is None else [n for n in names if n in manifest.files]:
        path, entry = directory / name, manifest.files[name]
        if not path.is_file():
            raise VaswaniError(f"{path}: missing, though {directory / MANIFEST_FILE} lists it; the {manifest.kind} "
                               "is incomplete")
        size = path.stat().st_size
        if size != entry["bytes"]:
            raise VaswaniError(f"{path}: {size:,} bytes, but {directory / MANIFEST_FILE} says vaswani wrote "
                               f"{entry['bytes']:,}; the file is truncated or was replaced")
        if file_sha256(path) != entry["sha256"]:
            raise VaswaniError(f"{path}: its content differs from what {directory / MANIFEST_FILE} records (sha256); "
                               "the file is damaged or was edited")



# Kinds several commands write under the same name: a manifest of one replaces only what its writer wrote.
