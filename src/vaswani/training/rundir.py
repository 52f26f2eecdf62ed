"""Who owns a run directory, and what is already in it.

A run directory has one owner at a time: :func:`lock_run_directory` takes an exclusive ``fcntl.flock`` on
``RUN/.lock`` for the whole run. The kernel drops the lock when the process ends, however it ends, so a SIGKILLed run
never leaves a stale lock behind; a second trainer started on the same directory is refused with the holder's pid.

A directory is a run directory because the trainer said so: a new run writes the manifest ``RUN/vaswani.json``
(kind "run") before anything else. A new run starts only in a directory that is missing or empty; one that holds
anything else (a checkpoint, an export, a folder of your own) is refused, whatever files it happens to lack. A run
directory written without a manifest is still known by its contents (:func:`run_evidence`: a config, metrics,
provenance, TensorBoard events or anything under ``checkpoints/``), and a resume writes its manifest. A new run never
writes over an earlier one: it needs ``--resume`` to continue it, or ``--start-over``, which moves the earlier run's
files into ``RUN/superseded-<time>/`` (nothing is deleted).
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
from vaswani.io import (
    MANIFEST_FILE,
    check_output,
    ensure_writable_directory,
    move,
    read_manifest,
    write_faults_named,
    write_manifest,
)
from vaswani.training.checkpoint import latest_checkpoint

LOCK_FILE = ".lock"
RUN_KIND = "run"
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


def _refuse_another_kind(run_dir: Path) -> None:
    manifest = read_manifest(run_dir) if run_dir.is_dir() else None
    if manifest is not None and manifest.kind != RUN_KIND:
        raise VaswaniError(f"{run_dir} is a {manifest.kind} (see its {MANIFEST_FILE}), not a run directory; "
                           "pick another --run-dir")


@contextlib.contextmanager
def lock_run_directory(run_dir: Path) -> Iterator[None]:
    """Hold the run directory's lock for the duration of the ``with`` block (and no longer than the process). A
    directory whose manifest names another kind (a checkpoint, an export), or one inside any folder vaswani wrote,
    is refused before the lock file is made. A start refused inside the block, before the run wrote anything,
    leaves nothing behind: the lock file and the directory are removed again if this claim made them."""
    _refuse_another_kind(run_dir)
    check_output(run_dir, command="train", writes="files", kind=RUN_KIND, option="--run-dir")
    made = [folder for folder in (run_dir.absolute(), *run_dir.absolute().parents) if not folder.exists()]
    ensure_writable_directory(run_dir, "run directory")
    path = run_dir / LOCK_FILE
    made_lock = not path.exists()
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as error:
        raise EnvironmentFault(f"{path}: cannot create the run's lock file ({error.strerror})") from None
    before = sorted(os.listdir(run_dir))
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
        try:
            yield
        except VaswaniError:
            if made_lock and sorted(os.listdir(run_dir)) == before:  # refused before the run wrote anything
                path.unlink(missing_ok=True)  # still locked by us: no other trainer holds this file
                with contextlib.suppress(OSError):
                    for folder in made:
                        folder.rmdir()
            raise
    finally:
        os.close(fd)  # closing the descriptor releases the lock


def check_start(run_dir: Path, resume: bool, start_over: bool) -> None:
    """Refuse a start that would mix two runs, write into a directory that is not a run, or resume nothing; with
    ``start_over``, move the earlier run aside. A new run's manifest is written here, first. Call it while holding
    :func:`lock_run_directory`."""
    _refuse_another_kind(run_dir)
    manifest = read_manifest(run_dir)
    evidence = run_evidence(run_dir)
    is_run = manifest is not None or bool(evidence)
    if resume:
        if not is_run or latest_checkpoint(run_dir / "checkpoints") is None:
            what = (f"it holds {', '.join(evidence)} but no complete checkpoint" if evidence
                    else "no run was started there")
            raise VaswaniError(f"{run_dir}: nothing to resume ({what}); drop --resume to start a new run"
                               + (" with --start-over" if evidence else ""))
        if manifest is None:
            _write_run_manifest(run_dir)
        return
    if not is_run:
        others = sorted(p.name for p in run_dir.iterdir() if p.name != LOCK_FILE)
        if others:
            shown = ", ".join(others[:4]) + (", ..." if len(others) > 4 else "")
            raise VaswaniError(f"{run_dir} is not empty and holds no run ({shown}); a new run needs a new or empty "
                               "directory: pick another --run-dir")
        _write_run_manifest(run_dir)
        return
    if not evidence:  # a run directory whose run has not written anything yet
        return
    if not start_over:
        raise VaswaniError(f"{run_dir} already holds a run ({', '.join(evidence)}): add --resume to continue it, "
                           "--start-over to move its files into a superseded-* folder and start again, "
                           "or pick another --run-dir")
    aside = run_dir / time.strftime("superseded-%Y%m%dT%H%M%SZ", time.gmtime())
    if aside.exists():
        aside = aside.with_name(f"{aside.name}-{os.getpid()}")
    with write_faults_named(aside):
        aside.mkdir()
    for name in (*RUN_FILES, "tokenizer.json"):
        if (run_dir / name).exists() or (run_dir / name).is_symlink():
            move(run_dir / name, aside / name)
    if manifest is None:
        _write_run_manifest(run_dir)
    print(f"start over: the earlier run's files are now in {aside}", file=sys.stderr)


def _write_run_manifest(run_dir: Path) -> None:
    # A run directory grows while it runs: its manifest says what it is and lists no files.
    write_manifest(run_dir, RUN_KIND, files=[])


__all__ = ["LOCK_FILE", "RUN_FILES", "RUN_KIND", "check_start", "lock_run_directory", "run_evidence"]
