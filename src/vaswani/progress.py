"""Progress of long work that both a person at a terminal and a log can read.

On a terminal, stderr shows a tqdm bar redrawn in place. Anywhere else (a file under nohup, a scheduler's log,
a CI pipe) a redrawn bar is thousands of carriage returns that ``tail`` shows as one line, so the same work
prints a plain line every ``VASWANI_PROGRESS_SECONDS`` seconds (30 by default) with what it does, the count
done of the total, the rate and the time left, and one line when it ends::

    encoding train: 1,203,000/4,500,000 pairs (27%), 40,100 pairs/s, 1:22 left
    encoding train: 4,500,000 pairs in 1:52 (40,178 pairs/s)

Work shorter than the interval prints nothing, as a bar on a terminal leaves nothing: a short command's output
is its result (or its one-line error) alone, however loaded the machine. Every long step asks
:func:`progress_reporter` for its reporter and calls ``update`` as work is done; which kind it gets is decided
here, from where stderr goes.
"""

from __future__ import annotations

import math
import os
import sys
import time
from typing import Any, Callable, Protocol, TextIO

from vaswani.errors import ConfigError

PROGRESS_SECONDS_VARIABLE = "VASWANI_PROGRESS_SECONDS"
DEFAULT_PROGRESS_SECONDS = 30.0


class ProgressReporter(Protocol):
    """What a long step calls, whichever reporter it got: a tqdm bar, :class:`LogProgress` or
    :class:`SilentProgress`."""

    n: int
    total: int | None

    def update(self, count: int = 1) -> Any: ...

    def set_postfix(self, **values: Any) -> Any: ...

    def refresh(self) -> Any: ...

    def close(self) -> Any: ...

    def __enter__(self) -> Any: ...

    def __exit__(self, *details: Any) -> Any: ...


def progress_seconds() -> float:
    """The seconds between two lines of progress in a log: ``VASWANI_PROGRESS_SECONDS``, or 30."""
    value = os.environ.get(PROGRESS_SECONDS_VARIABLE, "").strip()
    if not value:
        return DEFAULT_PROGRESS_SECONDS
    try:
        seconds = float(value)
    except ValueError:
        seconds = math.nan
    if not (math.isfinite(seconds) and seconds > 0):
        raise ConfigError(f"{PROGRESS_SECONDS_VARIABLE}={value!r}: give the seconds between two progress "
                          "lines in a log as a number above 0 (e.g. 30), or unset it")
    return seconds


class LogProgress:
    """Progress as plain lines: one every ``interval`` seconds of ``clock`` while work is done, and one at the
    end. The attributes a tqdm bar's user reads and sets (``n``, ``total``) mean the same here; ``total`` may
    change as the work runs (a run on the clock) or be None (no percentage, no time left)."""

    def __init__(self, total: int | None, description: str, unit: str, stream: TextIO, interval: float,
                 clock: Callable[[], float] = time.monotonic, initial: int = 0) -> None:
        self.total, self.n = total, initial
        self.description, self.unit = description, unit.strip() or "it"
        self.stream, self.interval, self.clock = stream, interval, clock
        self.initial = initial
        self.started = self.last_line = clock()
        self.postfix: dict[str, Any] = {}
        self.closed, self.lines = False, 0

    def update(self, count: int = 1) -> None:
        self.n += count
        now = self.clock()
        if now - self.last_line >= self.interval:
            self.last_line = now
            self._print(self._running(now - self.started))

    def set_postfix(self, **values: Any) -> None:
        """Values shown after the counts (a training run's loss, learning rate, tokens/s)."""
        self.postfix = values

    def refresh(self) -> None:
        """Nothing to redraw: the next line shows what changed."""

    def close(self) -> None:
        """The line that says the work ended: how much, in how long, at what rate."""
        if self.closed:
            return
        self.closed = True
        seconds = self.clock() - self.started
        if self.lines or seconds >= self.interval:  # shorter work printed nothing, and ends so
            rate = self._rate(self.n - self.initial, seconds)
            self._print(f"{self.description}: {self._amount(self.n)} in {duration(seconds)}"
                        + (f" ({rate})" if rate else "") + self._postfix())

    def __enter__(self) -> LogProgress:
        return self

    def __exit__(self, kind: type | None, *_: Any) -> None:
        if kind is None:
            self.close()
        else:  # the error that follows says what happened; a line saying the work ended would not be true
            self.closed = True

    def _running(self, seconds: float) -> str:
        done = self.n - self.initial
        line = f"{self.description}: "
        if self.total:
            line += f"{self._amount(self.n, self.total)} ({min(self.n / self.total, 1.0):.0%})"
        else:
            line += self._amount(self.n)
        rate = self._rate(done, seconds)
        if rate:
            line += f", {rate}"
        if self.total and done > 0 and seconds > 0:
            line += f", {duration(max(self.total - self.n, 0) * seconds / done)} left"
        return line + self._postfix()

    def _rate(self, count: int, seconds: float) -> str:
        if count <= 0 or seconds <= 0:
            return ""
        per_second = count / seconds
        if self.unit == "B":
            return f"{per_second / 1e6:,.1f} MB/s"
        return (f"{per_second:,.0f}" if per_second >= 100 else f"{per_second:.3g}") + f" {self.unit}/s"

    def _amount(self, count: int, total: int | None = None) -> str:
        if self.unit == "B":  # bytes read: megabytes are what a reader compares with a file's size
            shown = f"{count / 1e6:,.1f}" + (f"/{total / 1e6:,.1f}" if total is not None else "")
            return f"{shown} MB"
        return f"{count:,}" + (f"/{total:,}" if total is not None else "") + f" {self.unit}"

    def _postfix(self) -> str:
        return "".join(f", {key} {value}" for key, value in self.postfix.items())

    def _print(self, line: str) -> None:
        print(line, file=self.stream, flush=True)
        self.lines += 1


class SilentProgress:
    """Progress nobody is shown (``enabled=False``): counts, prints nothing."""

    def __init__(self, total: int | None, initial: int = 0) -> None:
        self.total, self.n = total, initial

    def update(self, count: int = 1) -> None:
        self.n += count

    def set_postfix(self, **values: Any) -> None:
        pass

    def refresh(self) -> None:
        pass

    def close(self) -> None:
        pass

    def __enter__(self) -> SilentProgress:
        return self

    def __exit__(self, *_: Any) -> None:
        pass


def progress_reporter(total: int | None, description: str, unit: str = "it", *, enabled: bool = True,
                      initial: int = 0, stream: TextIO | None = None,
                      clock: Callable[[], float] = time.monotonic, **bar_options: Any) -> ProgressReporter:
    """The reporter of one long step on ``stream`` (stderr by default): a tqdm bar when it is a terminal (with
    ``bar_options``, tqdm's own), plain lines every :func:`progress_seconds` otherwise, nothing unless
    ``enabled``. All three take ``update(count)``, ``set_postfix(**values)``, ``refresh()`` and ``close()``,
    and are context managers."""
    if not enabled:
        return SilentProgress(total, initial)
    stream = stream if stream is not None else sys.stderr
    if _is_terminal(stream):
        from tqdm import tqdm  # imported only for a bar: a tenth of a second of every start-up otherwise

        return tqdm(total=total, initial=initial, desc=description, unit=unit, file=stream,
                    dynamic_ncols=True, **bar_options)
    return LogProgress(total, description, unit, stream, progress_seconds(), clock, initial)


def _is_terminal(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # no isatty, or a closed stream
        return False


def duration(seconds: float) -> str:
    """``seconds`` as M:SS, or H:MM:SS from an hour on."""
    whole = int(round(seconds))
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


__all__ = ["DEFAULT_PROGRESS_SECONDS", "LogProgress", "PROGRESS_SECONDS_VARIABLE", "ProgressReporter",
           "SilentProgress", "duration", "progress_reporter", "progress_seconds"]
