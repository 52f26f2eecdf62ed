"""Wall and CPU seconds per phase of a long job (preparing a corpus): what ``vaswani bench data`` reports as CPU
time over wall time, to show whether a phase keeps every core busy."""

from __future__ import annotations

import contextlib
import os
import time
from typing import Iterator


class PhaseClock:
    """Wall and CPU seconds spent in each phase of preparing files, in the order they first ran (a phase may
    run twice). The CPU seconds count this process's threads and the worker processes that ended within the
    phase (the encoding's pool is shut down inside it)."""

    def __init__(self) -> None:
        self.seconds, self.cpu_seconds = {}, {}  # phase -> seconds

    @contextlib.contextmanager
    def __call__(self, phase: str) -> Iterator[None]:
        start, cpu_start = time.perf_counter(), _cpu_seconds()
        try:
            yield
        finally:
            self.seconds[phase] = self.seconds.get(phase, 0.0) + time.perf_counter() - start
            self.cpu_seconds[phase] = self.cpu_seconds.get(phase, 0.0) + _cpu_seconds() - cpu_start


def _cpu_seconds() -> float:
    """User and system seconds of this process and of its children that have ended."""
    return sum(os.times()[:4])  # user, system, children's user, children's system


__all__ = ["PhaseClock"]
