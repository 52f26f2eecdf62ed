"""Stop signals: SIGINT (Ctrl-C) and SIGTERM, which is how schedulers (Slurm, Kubernetes, systemd) stop a job,
both end a run the same way: the update in flight finishes, a checkpoint is saved, and ``vaswani train`` exits
with 128 + the signal's number (130, 143).

A further signal gives up at once (KeyboardInterrupt), except while a checkpoint is being written: a scheduler
that repeats its SIGTERM then still gets the checkpoint, because the signal waits for the write to finish, up to
:data:`SAVE_GRACE_SECONDS`. A write that outlasts that wait is abandoned; the staged checkpoint is removed and the
checkpoints on disk stay as they were.
"""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Iterator
from types import FrameType
from typing import Any

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
# How long a further stop signal waits for a checkpoint being written: a checkpoint of the base model (a few hundred
# MB) takes seconds on a local disk, and schedulers send SIGKILL 30 s (Kubernetes) or more after their SIGTERM.
SAVE_GRACE_SECONDS = 20.0


class StopSignals:
    """The stop signals of one run: :meth:`caught` installs the handlers, :attr:`received` is the first signal, and
    :meth:`protecting_a_save` makes further ones wait for the checkpoint being written."""

    def __init__(self, grace_seconds: float | None = None):
        self.received: int | None = None
        self.grace_seconds = SAVE_GRACE_SECONDS if grace_seconds is None else grace_seconds
        self._saving = False
        self._waiting = False  # a further signal came during the save: the grace timer (SIGALRM) runs
        self._previous_alarm: Any = None

    @property
    def name(self) -> str | None:
        """The first signal's name ("SIGTERM"), or None."""
        return signal.Signals(self.received).name if self.received is not None else None

    @contextlib.contextmanager
    def caught(self) -> Iterator[None]:
        previous = {signum: signal.signal(signum, self._on_signal) for signum in STOP_SIGNALS}
        try:
            yield
        finally:
            for signum, handler in previous.items():
                signal.signal(signum, handler)

    @contextlib.contextmanager
    def protecting_a_save(self) -> Iterator[None]:
        """While a checkpoint is written: a further stop signal waits for it (within the grace period)."""
        self._saving = True
        try:
            yield
        finally:
            self._saving = False
            if self._waiting:
                signal.setitimer(signal.ITIMER_REAL, 0)
                signal.signal(signal.SIGALRM, self._previous_alarm)
                self._waiting = False

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        if self.received is None:
            self.received = signum
        elif not self._saving:
            raise KeyboardInterrupt
        elif not self._waiting:
            self._waiting = True
            self._previous_alarm = signal.signal(signal.SIGALRM, self._on_grace_spent)
            signal.setitimer(signal.ITIMER_REAL, self.grace_seconds)

    def _on_grace_spent(self, signum: int, frame: FrameType | None) -> None:
        if self._saving:
            raise KeyboardInterrupt


__all__ = ["SAVE_GRACE_SECONDS", "STOP_SIGNALS", "StopSignals"]
