"""Writing a file or a folder whole: staged beside its destination, fsynced, renamed into place (one fsync rule),
and a write the machine cannot take named in one line."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import resource
import shutil
import tempfile
from pathlib import Path
from typing import Any, Callable, Iterator

from vaswani.errors import EnvironmentFault, VaswaniError


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def default_file_mode() -> int:
    """The permissions a plainly created file would get (mkstemp makes private 0600 files)."""
    return 0o666 & ~_umask()


def default_directory_mode() -> int:
    """The permissions a plainly created directory would get (mkdtemp makes private 0700 ones)."""
    return 0o777 & ~_umask()


def write_fault(error: BaseException, path: str | Path) -> EnvironmentFault | None:
    """The one-line EnvironmentFault for ``error``, raised while writing ``path``, when the machine is to blame; None
    when it is not (a bug keeps its traceback).

    Libraries report the same full disk differently: an OSError with an errno (plain writes), an OSError without one
    (numpy: "N requested and M written"), torch.save's RuntimeError ("unexpected pos ..."), safetensors' own error
    ("I/O error: ... (os error 28)"). So the errno is read where there is one, and otherwise the file-size limit and
    the free space of the destination's file system say what happened.
    """
    number = getattr(error, "errno", None)
    if number is None:
        match = re.search(r"os error (\d+)", str(error))
        number = int(match.group(1)) if match else None
    if number is None:
        soft_limit, _ = resource.getrlimit(resource.RLIMIT_FSIZE)
        if soft_limit != resource.RLIM_INFINITY:
            number = errno.EFBIG
        else:
            try:
                number = errno.ENOSPC if shutil.disk_usage(Path(path).parent).free < 1 << 20 else None
            except OSError:
                number = None
    if number is None:
        return None
    reason = os.strerror(number)
    if number == errno.EFBIG:
        soft_limit, _ = resource.getrlimit(resource.RLIMIT_FSIZE)
        limit = f"{soft_limit:,} bytes" if soft_limit != resource.RLIM_INFINITY else "set"
        reason += f": the file-size limit (ulimit -f) is {limit}; raise it or write elsewhere"
    elif number in (errno.ENOSPC, errno.EDQUOT):
        reason += "; free some space or write elsewhere"
    return EnvironmentFault(f"{path}: cannot be written ({reason})")


@contextlib.contextmanager
def write_faults_named(path: str | Path) -> Iterator[None]:
    """Run the block that writes ``path``; a failure the machine is to blame for (see :func:`write_fault`) becomes
    one EnvironmentFault naming ``path``. The caller removes what the failed write left."""
    try:
        yield
    except VaswaniError:
        raise
    except Exception as error:
        fault = write_fault(error, path)
        if fault is None:
            raise
        raise fault from None


@contextlib.contextmanager
def staging_reported_as(staging: str | Path, destination: str | Path) -> Iterator[None]:
    """A write fault in the block names ``destination`` where it would name ``staging``, the temporary directory the
    output is assembled in: the user knows the one, not the other."""
    try:
        yield
    except EnvironmentFault as fault:
        raise EnvironmentFault(str(fault).replace(str(staging), str(destination))) from None


def atomic_write(path: str | Path, write: Callable[[str], None]) -> None:
    """Call ``write(temporary_path)`` to produce the file, then fsync and rename it to ``path`` and fsync the
    directory. A write the machine refuses (full disk, file-size limit) is an EnvironmentFault naming ``path``; any
    failure of ``write`` leaves no temporary file."""
    path = Path(path)
    with write_faults_named(path):
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        os.close(fd)
        try:
            write(tmp)
            fsync_file(tmp)
            os.chmod(tmp, default_file_mode())
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        fsync_directory(path.parent)


def atomic_write_bytes(path: str | Path, data: bytes) -> None:
    """Replace ``path`` with ``data`` atomically."""
    atomic_write(path, lambda tmp: Path(tmp).write_bytes(data))


def atomic_write_text(path: str | Path, text: str) -> None:
    """Replace ``path`` with UTF-8 ``text`` atomically."""
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_json(path: str | Path, payload: Any) -> None:
    """Replace ``path`` with ``payload`` as indented JSON (non-JSON values, e.g. paths, written as strings)."""
    atomic_write_text(path, json.dumps(payload, indent=2, default=str) + "\n")


def atomic_write_figure(path: str | Path, figure: Any, dpi: int = 120, tight: bool = True) -> None:
    """Replace ``path`` with a matplotlib ``figure`` as PNG atomically (the figure is left open)."""
    atomic_write(path, lambda tmp: figure.savefig(tmp, format="png", dpi=dpi,
                                                  bbox_inches="tight" if tight else None))


def atomic_copy(source: str | Path, destination: str | Path) -> None:
    """Replace ``destination`` with a copy of ``source`` atomically (a crash leaves the old file or the new one)."""
    atomic_write(destination, lambda tmp: shutil.copyfile(source, tmp))


def staging_directory(destination: str | Path, name: str | None = None) -> Path:
    """An empty directory beside ``destination`` to assemble it in, with the permissions a plainly created directory
    would have. Hidden: ``name`` when the caller must find it again (a checkpoint's ``.tmp-step_N-PID``, which a
    later save removes if a kill left it), else a fresh ``.NAME.XXXXXXXX``."""
    destination = Path(destination)
    with write_faults_named(destination):
        destination.parent.mkdir(parents=True, exist_ok=True)
        if name is None:
            staging = Path(tempfile.mkdtemp(prefix=f".{destination.name}.", dir=destination.parent))
        else:
            staging = destination.parent / name
            shutil.rmtree(staging, ignore_errors=True)
            staging.mkdir()
        os.chmod(staging, default_directory_mode())
    return staging


def install_directory(staging: str | Path, destination: str | Path, keep: Callable[[Path], bool] | None = None,
                      aside: str | Path | None = None) -> bool:
    """Make the assembled ``staging`` directory ``destination``: fsync every file in it and the directory, then
    rename it into place and fsync the parent. An existing ``destination`` is kept when ``keep(destination)`` says
    so (another process wrote the same output meanwhile: ``staging`` is discarded and False returned); otherwise it
    is first renamed ``aside`` (default: a fresh hidden directory beside it), and deleted only once the new one is in
    place (a named ``aside`` is deleted then even if a killed install left it). A kill at any instant leaves the old
    ``destination`` or the new one, never a mix. Returns True when ``staging`` took the place."""
    staging, destination = Path(staging), Path(destination)
    for path in sorted(staging.rglob("*")):
        if path.is_file() and not path.is_symlink():
            fsync_file(path)
    fsync_directory(staging)
    if keep is not None and destination.exists() and keep(destination):
        shutil.rmtree(staging, ignore_errors=True)
        return False
    previous = None
    if destination.exists() or destination.is_symlink():
        if aside is None:
            holder = Path(tempfile.mkdtemp(prefix=f".{destination.name}.old.", dir=destination.parent))
            previous = holder / destination.name
        else:
            previous = holder = Path(aside)
            shutil.rmtree(holder, ignore_errors=True)
        os.replace(destination, previous)
    try:
        os.replace(staging, destination)
    except OSError as error:
        if error.errno in (errno.ENOTEMPTY, errno.EEXIST) and keep is not None and keep(destination):
            shutil.rmtree(staging, ignore_errors=True)  # another process put a whole one there first
            if previous is not None:
                shutil.rmtree(holder, ignore_errors=True)
            return False
        if previous is not None:
            os.replace(previous, destination)
        raise
    fsync_directory(destination.parent)
    if previous is not None or aside is not None:  # a named ``aside`` may be left from an earlier, killed install
        shutil.rmtree(Path(aside) if aside is not None else holder, ignore_errors=True)
    return True


def atomic_symlink(link: str | Path, target: str) -> None:
    """Make ``link`` a symlink to ``target`` (relative to the link's directory), replacing what was there by one
    rename: a reader finds the old link or the new one, never none."""
    link = Path(link)
    with write_faults_named(link):
        temporary = link.parent / f".{link.name}.tmp-{os.getpid()}"
        temporary.unlink(missing_ok=True)
        os.symlink(target, temporary)
        os.replace(temporary, link)
        fsync_directory(link.parent)


def move(source: str | Path, destination: str | Path) -> None:
    """Rename ``source`` (a file or a folder) to ``destination`` on the same file system, durably: both directories
    are fsynced, so a crash finds it in one place or the other."""
    source, destination = Path(source), Path(destination)
    with write_faults_named(destination):
        os.replace(source, destination)
        fsync_directory(destination.parent)
        if source.parent != destination.parent:
            fsync_directory(source.parent)


def fsync_file(path: str | Path) -> None:
    """Write ``path``'s bytes to the disk before anything is renamed to publish it."""
    with open(path, "rb") as handle:
        os.fsync(handle.fileno())


def fsync_directory(path: str | Path) -> None:
    """Make a rename inside ``path`` durable (the directory entry is written, not only the file). A file system that
    cannot fsync a directory (EINVAL) is skipped: the rename is atomic there all the same."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    except OSError as error:
        if error.errno != errno.EINVAL:
            raise
    finally:
        os.close(fd)
