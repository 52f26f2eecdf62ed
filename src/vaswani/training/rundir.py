"""Who owns a run directory, and what is already in it.

A run directory has one owner at a time: :func:`claim` takes an exclusive ``fcntl.flock`` on ``RUN/.lock`` for the
whole run. The kernel drops the lock when the process ends, however it ends, so a SIGKILLed run never leaves a
stale lock behind; a second trainer started on the same directory is refused with the holder's pid.

Whether a directory "already holds a run" is read from its contents (:func:`run_evidence`): a config, metrics,
provenance, TensorBoard events or anything under ``checkpoints/``, never from one link that a crash may have
left dangling. A new run never writes over an earlier one: it needs ``--resume`` to continue it, or
``--start-over``, which moves the earlier run's files into ``RUN/superseded-<time>/`` (nothing is deleted).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from vaswani.errors import EnvironmentFault, VaswaniError
from vaswani.io import ensure_writable_directory
from vaswani.training.checkpoint import latest_checkpoint

LOCK_FILE = ".lock"
# What a run writes into its directory (tokenizer.json is only a copy of the prepared data's and proves nothing).
RUN_FILES = ("config.yaml", "metrics.jsonl", "provenance.jsonl", "summary.json", "tensorboard", "plots",
             "checkpoints")


def run_evidence(run_dir: Path) -> list[str]:
    """The files in ``run_dir`` that show an earlier run was started there (empty: the directory is free)."""
    found = []
    for name in RUN_FILES:
        path = run_dir / name
        if path.is_dir() and not path.is_symlink():
            if any(path.iterdir()):
                found.append(f"{name}/")
        elif path.exists() or path.is_symlink():
            found.append(name)
    return found


@contextlib.contextmanager
def claim(run_dir: Path) -> Iterator[None]:
    """Hold the run directory's lock for the duration of the ``with`` block (and no longer than the process)."""
    ensure_writable_directory(run_dir, "run directory")
    path = run_dir / LOCK_FILE
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as error:
        raise EnvironmentFault(f"{path}: cannot create the run's lock file ({error.strerror})") from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as error:
            if error.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise EnvironmentFault(f"{path}: cannot lock the run directory ({error.strerror})") from None
            holder = os.pread(fd, 64, 0).decode(errors="replace").strip() or "unknown"
            raise VaswaniError(f"{run_dir} is in use by another trainer (pid {holder}); wait for it to finish, "
                               "stop it, or pick another --run-dir") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        yield
    finally:
        os.close(fd)  # closing the descriptor releases the lock


def check_start(run_dir: Path, resume: bool, start_over: bool) -> None:
    """Refuse a start that would mix two runs or resume nothing; with ``start_over``, move the earlier run aside.
    Call it while holding :func:`claim`."""
    evidence = run_evidence(run_dir)
    if resume:
        if latest_checkpoint(run_dir / "checkpoints") is None:
            what = (f"it holds {', '.join(evidence)} but no complete checkpoint" if evidence
                    else "no run was started there")
            raise VaswaniError(f"{run_dir}: nothing to resume ({what}); drop --resume to start a new run"
                               + (" with --start-over" if evidence else ""))
        return
    if not evidence:
        return
    if not start_over:
        raise VaswaniError(f"{run_dir} already holds a run ({', '.join(evidence)}): add --resume to continue it, "
                           "--start-over to move its files into a superseded-* folder and start again, "
                           "or pick another --run-dir")
    aside = run_dir / time.strftime("superseded-%Y%m%dT%H%M%SZ", time.gmtime())
    if aside.exists():
        aside = aside.with_name(f"{aside.name}-{os.getpid()}")
    aside.mkdir()
    for name in (*RUN_FILES, "tokenizer.json"):
        if (run_dir / name).exists() or (run_dir / name).is_symlink():
            os.replace(run_dir / name, aside / name)
    print(f"start over: the earlier run's files are now in {aside}", file=sys.stderr)


__all__ = ["LOCK_FILE", "RUN_FILES", "check_start", "claim", "run_evidence"]
