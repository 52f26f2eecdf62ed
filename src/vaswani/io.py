"""Writing files so that a crash never leaves half of one: every file the tool writes goes through here.

The pattern is the same everywhere: write a temporary file in the destination's directory, fsync it, give it the
permissions a plainly created file would have, then ``os.replace`` it over the destination. Readers see the old file
or the new one, never a torn one, even if the process is killed mid-write.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any, Callable, Iterator, Literal, Sequence, TextIO

from vaswani.errors import EnvironmentFault, VaswaniError


def default_file_mode() -> int:
    """The permissions a plainly created file would get (mkstemp makes private 0600 files)."""
    mask = os.umask(0)
    os.umask(mask)
    return 0o666 & ~mask


def atomic_write(path: str | Path, write: Callable[[str], None]) -> None:
    """Call ``write(temporary_path)`` to produce the file, then fsync and rename it to ``path``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    try:
        write(tmp)
        with open(tmp, "rb+") as handle:
            os.fsync(handle.fileno())
        os.chmod(tmp, default_file_mode())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_bytes(path: str | Path, data: bytes) -> None:
    """Replace ``path`` with ``data`` atomically."""
    atomic_write(path, lambda tmp: Path(tmp).write_bytes(data))


def atomic_write_text(path: str | Path, text: str) -> None:
    """Replace ``path`` with UTF-8 ``text`` atomically."""
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_json(path: str | Path, payload: Any) -> None:
    """Replace ``path`` with ``payload`` as indented JSON (non-JSON values, e.g. paths, written as strings)."""
    atomic_write_text(path, json.dumps(payload, indent=2, default=str) + "\n")


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


def check_new_directory(out: str | Path, force: bool, inputs: Sequence[str | Path] = (),
                        option: str = "--out") -> None:
    """Before any work, refuse an output directory that cannot be (re)placed safely: a file, a non-empty directory
    without ``force``, and even with it a directory holding the current directory or one of the command's own
    ``inputs`` (replacing it would delete them); then prove its parent can be written."""
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise VaswaniError(f"{option} {out} is a file, not a directory")
    if out.is_dir() and any(out.iterdir()):
        if not force:
            raise VaswaniError(f"{option} {out} exists and is not empty; pass --force to replace it")
        target = out.resolve()
        for kept, what in [(Path.cwd(), "the current directory"), *((Path(p), str(p)) for p in inputs)]:
            if kept.resolve() == target or target in kept.resolve().parents:
                raise VaswaniError(f"{option} {out} holds {what}, which replacing it would delete; "
                                   "pick a new directory")
    ensure_writable_directory(out.parent, f"parent of {option} {out}")


@contextlib.contextmanager
def directory_written_whole(out: str | Path) -> Iterator[Path]:
    """Yield an empty staging directory beside ``out``; when the block succeeds it takes ``out``'s place, and an
    existing ``out`` is deleted only after that. A failure (or a kill) never leaves a half-written ``out`` and
    never loses the old one: what can remain is a hidden ``.NAME.*`` directory beside it."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        yield staging
        previous = None
        if out.exists():
            previous = Path(tempfile.mkdtemp(prefix=f".{out.name}.old.", dir=out.parent))
            os.replace(out, previous / out.name)
        try:
            os.replace(staging, out)
        except OSError:
            if previous is not None:
                os.replace(previous / out.name, out)
            raise
        if previous is not None:
            shutil.rmtree(previous, ignore_errors=True)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def check_output_file(path: str | Path, option: str) -> Path:
    """Refuse, before a command's work, an output file it could not write at the end: ``path`` names a directory
    or something else that is not a file (atomic_write would replace a device such as /dev/null with a file), or
    its directory cannot be written. The one-line error names ``option`` (e.g. ``--output``) and the path."""
    path = Path(path)
    if path.is_dir():
        raise VaswaniError(f"{option} {path}: is a directory; name a file")
    if path.exists() and not path.is_file():
        raise VaswaniError(f"{option} {path}: is not a regular file; name a file")
    ensure_writable_directory(path.parent, f"{option} directory")
    return path


def standard_stream(name: Literal["stdin", "stdout"], instead: str) -> TextIO:
    """``sys.stdin`` or ``sys.stdout``; a one-line error saying what to do ``instead`` when the shell started us
    with it closed (``<&-``, ``>&-``), which Python shows as None."""
    stream = getattr(sys, name)
    if stream is None:
        label = "standard input" if name == "stdin" else "standard output"
        raise VaswaniError(f"{label} is closed; {instead}")
    return stream
