"""Progress a log can read: a bar on a terminal, plain lines at a fixed interval anywhere else, nothing when
off."""

from __future__ import annotations

import io
from types import SimpleNamespace

import pytest

from vaswani.errors import ConfigError
from vaswani.progress import (
    DEFAULT_PROGRESS_SECONDS,
    PROGRESS_SECONDS_VARIABLE,
    LogProgress,
    SilentProgress,
    duration,
    progress_reporter,
    progress_seconds,
)
from vaswani.training.callbacks import ProgressBar


class FakeClock:
    """Seconds that pass only when the test says so."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.fixture(autouse=True)
def default_interval(monkeypatch):
    monkeypatch.delenv(PROGRESS_SECONDS_VARIABLE, raising=False)


def test_a_log_gets_a_line_per_interval_with_counts_rate_and_time_left_and_one_at_the_end():
    log, clock = io.StringIO(), FakeClock()
    with progress_reporter(4_500_000, "encoding train", " pairs", stream=log, clock=clock) as bar:
        assert isinstance(bar, LogProgress)
        for _ in range(9):  # 500,000 pairs every 10 s: a line at 30, 60 and 90 s
            clock.now += 10
            bar.update(500_000)
        assert log.getvalue().splitlines() == [
            "encoding train: 1,500,000/4,500,000 pairs (33%), 50,000 pairs/s, 1:00 left",
            "encoding train: 3,000,000/4,500,000 pairs (67%), 50,000 pairs/s, 0:30 left",
            "encoding train: 4,500,000/4,500,000 pairs (100%), 50,000 pairs/s, 0:00 left",
        ]
        clock.now += 5
    assert log.getvalue().splitlines()[-1] == "encoding train: 4,500,000 pairs in 1:35 (47,368 pairs/s)"
    assert "\r" not in log.getvalue()


def test_the_interval_is_a_setting_of_the_environment(monkeypatch):
    assert progress_seconds() == DEFAULT_PROGRESS_SECONDS == 30
    monkeypatch.setenv(PROGRESS_SECONDS_VARIABLE, "5")
    log, clock = io.StringIO(), FakeClock()
    bar = progress_reporter(None, "reading", "B", stream=log, clock=clock)
    clock.now += 4
    bar.update(2_000_000)
    assert log.getvalue() == ""
    clock.now += 1
    bar.update(3_000_000)  # no total: no percentage, no time left; bytes in megabytes
    assert log.getvalue() == "reading: 5.0 MB, 1.0 MB/s\n"
    for bad in ("0", "-3", "soon", "nan", "inf"):
        monkeypatch.setenv(PROGRESS_SECONDS_VARIABLE, bad)
        with pytest.raises(ConfigError, match=rf"^{PROGRESS_SECONDS_VARIABLE}={bad!r}: give the seconds"):
            progress_reporter(10, "reading", stream=io.StringIO())


def test_a_terminal_gets_the_bar_and_off_means_nothing():
    terminal = Terminal()
    with progress_reporter(10, "translating", "sentences", stream=terminal) as bar:
        assert not isinstance(bar, (LogProgress, SilentProgress))  # tqdm's, redrawn in place
        bar.update(10)
    assert "\r" in terminal.getvalue() and "10/10" in terminal.getvalue()
    quiet = io.StringIO()
    with progress_reporter(10, "translating", stream=quiet, enabled=False) as bar:
        bar.update(10)
        assert bar.n == 10
    assert quiet.getvalue() == ""


def test_work_shorter_than_the_interval_leaves_no_line():
    log, clock = io.StringIO(), FakeClock()
    with progress_reporter(3, "translating", "sentences", stream=log, clock=clock) as bar:
        clock.now += 29.9
        bar.update(3)
    assert log.getvalue() == ""  # a short command's output is its result alone, as on a terminal
    with progress_reporter(3, "translating", "sentences", stream=log, clock=clock) as bar:
        clock.now += 20
        bar.update(3)
        clock.now += 10  # no update came after the interval: the end still says how it went
    assert log.getvalue() == "translating: 3 sentences in 0:30 (0.1 sentences/s)\n"


def test_a_step_that_fails_says_no_more_than_its_error():
    log, clock = io.StringIO(), FakeClock()
    with pytest.raises(RuntimeError), progress_reporter(10, "checking train", stream=log, clock=clock) as bar:
        bar.update(3)
        raise RuntimeError("bad line")
    assert log.getvalue() == ""


def test_durations_read_as_a_clock():
    seconds = (0, 59.6, 61, 3600, 86399)
    assert [duration(s) for s in seconds] == ["0:00", "1:00", "1:01", "1:00:00", "23:59:59"]


def test_training_logs_lines_with_its_loss_and_keeps_its_count_across_a_resume(monkeypatch, capsys):
    monkeypatch.setenv(PROGRESS_SECONDS_VARIABLE, "1e-9")  # every update gets a line: no clock to fake here
    progress = SimpleNamespace(step=100, elapsed_seconds=50.0)
    settings = SimpleNamespace(train=SimpleNamespace(max_minutes=None))
    trainer = SimpleNamespace(config=settings, progress=progress, total_steps=200)
    bar = ProgressBar()
    bar.on_fit_start(trainer)
    bar.on_log(trainer, SimpleNamespace(loss=3.14159, lr=1e-4, tokens_per_s=12345.6, mfu=None))
    progress.step = 101
    bar.on_update_end(trainer, None)
    bar.on_fit_end(trainer, None)
    lines = capsys.readouterr().err.splitlines()
    assert lines[0].startswith("training: 101/200 steps (50%), ")
    assert lines[0].endswith(", loss 3.142, lr 1.00e-04, tok_s 12,346")
    assert lines[1].startswith("training: 101 steps in 0:00 (")  # one update in this session
