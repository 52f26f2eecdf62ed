"""Paths as the user means them, and whether a destination can be written before any work: a typed path made
absolute where it was typed (or, written in a file, against that file's folder), the user cache, and a probe that
proves a folder takes a new file."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from vaswani.errors import EnvironmentFault


def absolute_path(value: str | Path, against: str | Path | None = None) -> Path:
    """A user-typed path made absolute against the directory it was typed in (``~`` expanded), so that it still
    names the same folder after a ``chdir`` or in a child process started elsewhere; a path written in a file is
    relative to ``against``, that file's folder, wherever the command runs."""
    return Path(os.path.abspath(Path(against or ".") / Path(value).expanduser()))


def default_cache_dir() -> Path:
    """Where the tool keeps what it downloads and converts: ``$VASWANI_CACHE``, else ``~/.cache/vaswani``."""
    value = os.environ.get("VASWANI_CACHE")
    return absolute_path(value) if value else Path.home() / ".cache" / "vaswani"


def ensure_writable_directory(path: str | Path, what: str = "output directory") -> Path:
    """Create ``path`` if needed and prove it can be written by creating and removing a file in it, so a command
    fails before its work, not after. Raises EnvironmentFault naming the directory and the reason."""
    path = Path(path)
    try:
        path.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(dir=path, prefix=".write-test-")
        os.close(fd)
        os.unlink(probe)
    except FileExistsError:
        raise EnvironmentFault(f"{path}: the {what} exists and is not a directory") from None
    except OSError as error:
        raise EnvironmentFault(f"{path}: the {what} cannot be written ({error.strerror or error}); "
                               "pick a directory you can write to") from None
    return path


def probe_writable(target: str | Path, where: str) -> None:
    """Prove the nearest existing folder at or above where ``target`` will be written can take a new file, leaving
    nothing behind (missing folders are made only when the output is written); an EnvironmentFault naming
    ``where`` otherwise."""
    target = Path(target).absolute()
    folder = target if target.is_dir() else target.parent
    while not folder.exists():
        folder = folder.parent
    if not folder.is_dir():
        raise EnvironmentFault(f"{where}: {folder} is a file, not a directory")
    try:
        fd, probe = tempfile.mkstemp(dir=folder, prefix=".write-test-")
        os.close(fd)
        os.unlink(probe)
    except OSError as error:
        raise EnvironmentFault(f"{where}: {folder} cannot be written ({error.strerror or error}); pick a directory "
                               "you can write to") from None
