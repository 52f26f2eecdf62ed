"""``vaswani serve --workers N``: N processes behind one port, each with its own engine.

The parent binds the port (so a port in use is one line before anything loads), then starts the workers, each a
fresh interpreter (``spawn``) that loads the model on its share of the threads and serves the shared listening
socket with uvicorn: the kernel hands each new connection to one of them. The parent prints the address once every
worker is ready, and reports a worker's start-up error as its own one-line error (the other workers are stopped).

SIGTERM or Ctrl-C reaches the parent only (the workers are in a process group of their own, so a terminal's
Ctrl-C does not reach them twice); it sends each worker one SIGTERM, on which uvicorn stops accepting,
finishes the requests in flight and exits, and returns once all have. A worker that dies while serving is
named in one line and started again (after a pause that grows while it keeps dying soon after its start; after
several such exits in a row the server stops with an error, for whatever supervises it to restart it whole);
the other workers answer on the port meanwhile. A worker whose parent is gone (killed with SIGKILL) drains and
exits on its own.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import socket
import sys
import threading
import time
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait
from typing import Any

from vaswani.errors import EnvironmentFault, VaswaniError
from vaswani.serve.app import create_app, load_served_model
from vaswani.serve.settings import ServeSettings

# How long a worker may take to load its model before the server gives up (a --compile start-up takes minutes).
START_TIMEOUT_SECONDS = 1800
# uvicorn's wait for the requests in flight at SIGTERM before it closes their connections.
DRAIN_SECONDS = 30


@dataclass
class StartupFailed:
    """A worker's one-line start-up error, sent to the parent."""

    worker: int
    message: str
    exit_code: int


# A worker that dies while serving is started again after a pause that doubles with each exit that came soon
# after its start (a worker that cannot run any more, say its checkpoint was deleted, is not restarted in a
# tight loop), and the server stops after MAX_FAST_EXITS of those in a row.
FIRST_RESTART_SECONDS = 1.0
LONGEST_RESTART_SECONDS = 30.0
FAST_EXIT_SECONDS = 60.0
MAX_FAST_EXITS = 5


@dataclass
class RestartPolicy:
    """When a worker that exited is started again: ``after_exit`` returns the pause in seconds, or None once
    it has exited MAX_FAST_EXITS times in a row within FAST_EXIT_SECONDS of its start (the server then
    stops)."""

    fast_exits: int = 0

    def after_exit(self, lived_seconds: float) -> float | None:
        self.fast_exits = self.fast_exits + 1 if lived_seconds < FAST_EXIT_SECONDS else 0
        if self.fast_exits >= MAX_FAST_EXITS:
            return None
        return min(LONGEST_RESTART_SECONDS, FIRST_RESTART_SECONDS * 2 ** self.fast_exits)


@dataclass
class _Worker:
    """One worker slot: its current process (None while it waits to be started again) and its report pipe
    until the process has said it is ready."""

    number: int
    process: Any = None
    report: Connection | None = None
    started: float = 0.0
    restart_at: float = 0.0
    failure: str = ""  # the start-up error of the current process, if it sent one
    policy: RestartPolicy = field(default_factory=RestartPolicy)


def serve_workers(listener: socket.socket, checkpoint: str, settings: ServeSettings,
                  address: str) -> int | None:
    """Run ``settings.workers`` worker processes on ``listener`` until SIGTERM or Ctrl-C, then drain them all;
    a worker that dies meanwhile is logged in one line and started again (:class:`RestartPolicy`). Returns the
    signal that stopped the server."""
    context = multiprocessing.get_context("spawn")
    workers = [_Worker(number) for number in range(1, settings.workers + 1)]
    stopping = threading.Event()
    received: list[int] = []

    def start(worker: _Worker) -> None:
        receiver, sender = context.Pipe(duplex=False)  # one report: ready, or the start-up error
        worker.process = context.Process(target=run_worker, name=f"vaswani-worker-{worker.number}",
                                         args=(worker.number, listener, checkpoint, settings, sender))
        worker.process.start()
        sender.close()  # the worker holds its own end: the parent's read end sees EOF when it dies
        worker.report, worker.started, worker.failure = receiver, time.monotonic(), ""

    def stop() -> None:
        if not stopping.is_set():
            stopping.set()
            for worker in workers:
                process = worker.process
                if process is not None and process.pid is not None and process.exitcode is None:
                    os.kill(process.pid, signal.SIGTERM)

    def on_signal(signum: int, frame: Any) -> None:
        received.append(signum)
        stop()

    previous = {signum: signal.signal(signum, on_signal) for signum in (signal.SIGTERM, signal.SIGINT)}
    try:
        for worker in workers:
            start(worker)
        _wait_until_ready([worker.process for worker in workers], [worker.report for worker in workers],
                          stopping)
        for worker in workers:
            worker.report.close()
            worker.report = None
        if not stopping.is_set():
            print(f"vaswani serve: {address}  ({settings.workers} workers; API docs at /docs)", flush=True)
        _supervise(workers, start, stopping)
    finally:
        stop()
        _join([worker.process for worker in workers if worker.process is not None])
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    return received[0] if received else None


def _supervise(workers: list[_Worker], start: Any, stopping: threading.Event) -> None:
    """Until a stop: start again each worker that died once its pause is over, and say in one line on stderr
    when one dies and when its successor is ready. A second at a time at most, so that a stop is noticed."""
    while not stopping.is_set():
        now = time.monotonic()
        for worker in workers:
            if worker.process is None and worker.restart_at <= now:
                start(worker)
        waiting = [worker.restart_at - now for worker in workers if worker.process is None]
        reports = {worker.report: worker for worker in workers if worker.report is not None}
        exits = {worker.process.sentinel: worker for worker in workers if worker.process is not None}
        ready = wait([*reports, *exits], timeout=max(0.0, min([1.0, *waiting])))
        if stopping.is_set():
            return
        for item in ready:
            if item in reports:
                _read_report(reports[item])
        for item in ready:
            if item in exits:
                _worker_exited(exits[item])


def _read_report(worker: _Worker) -> None:
    try:
        report = worker.report.recv()
    except EOFError:  # it died before saying anything: its exit is reported on its own
        report = None
    if isinstance(report, StartupFailed):
        worker.failure = report.message
    elif report is not None:
        print(f"vaswani serve: worker {worker.number} (pid {worker.process.pid}) is serving again",
              file=sys.stderr, flush=True)
    worker.report.close()
    worker.report = None


def _worker_exited(worker: _Worker) -> None:
    process = worker.process
    process.join(5)  # its sentinel fired: it has exited, or is about to be reaped
    lived = time.monotonic() - worker.started
    status = _exit_status(process.exitcode)
    why = f"{status}: {worker.failure}" if worker.failure else status
    if worker.report is not None:
        worker.report.close()
        worker.report = None
    worker.process = None
    pause = worker.policy.after_exit(lived)
    if pause is None:
        raise EnvironmentFault(f"worker {worker.number} (pid {process.pid}) exited {MAX_FAST_EXITS} times "
                               f"in a row within {FAST_EXIT_SECONDS:g} s of starting ({why}); the server "
                               "stopped its other workers")
    worker.restart_at = time.monotonic() + pause
    print(f"vaswani serve: worker {worker.number} (pid {process.pid}) exited ({why}); starting it again in "
          f"{pause:g} s", file=sys.stderr, flush=True)


def _exit_status(code: int | None) -> str:
    if code is None:
        return "status unknown"
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"status {code}"


def _wait_until_ready(processes: list[Any], reports: list[Connection], stopping: threading.Event) -> None:
    """Return once every worker has said it is ready (or a stop was asked for); a worker's start-up error, or a
    worker that exits without one, is raised as the server's one-line error."""
    waiting = dict(zip(reports, range(1, len(processes) + 1)))
    deadline = time.monotonic() + START_TIMEOUT_SECONDS
    while waiting and not stopping.is_set():
        if time.monotonic() > deadline:
            raise EnvironmentFault(f"{len(waiting)} worker(s) were not ready after {START_TIMEOUT_SECONDS} s")
        for receiver in wait(list(waiting), timeout=1.0):
            number = waiting.pop(receiver)
            try:
                report = receiver.recv()
            except EOFError:
                raise EnvironmentFault(f"worker {number} exited at start-up (status {processes[number - 1].exitcode}) "
                                       "without saying why; run `vaswani serve` without --workers to see its "
                                       "output") from None
            if isinstance(report, StartupFailed):
                raise EnvironmentFault(report.message) if report.exit_code == 1 else VaswaniError(report.message)


def _join(processes: list[Any]) -> None:
    for process in processes:
        if process.pid is None:
            continue
        process.join(DRAIN_SECONDS + 10)
        if process.exitcode is None:  # stuck past uvicorn's own drain limit
            process.kill()
            process.join()


def run_worker(number: int, listener: socket.socket, checkpoint: str, settings: ServeSettings,
               report: Connection) -> None:
    """One worker process: load the model on this worker's threads, say so, serve ``listener`` until SIGTERM."""
    os.setpgrp()  # the terminal's Ctrl-C reaches the parent alone, which passes on one SIGTERM
    import uvicorn

    try:
        served = load_served_model(checkpoint, settings)
    except VaswaniError as error:
        report.send(StartupFailed(number, str(error), error.exit_code))
        return
    parent = os.getppid()
    config = uvicorn.Config(create_app(served, settings, worker=number), log_level="info",
                            timeout_graceful_shutdown=DRAIN_SECONDS)
    server = uvicorn.Server(config)
    threading.Thread(target=_exit_with_parent, args=(parent, server), daemon=True).start()
    report.send(number)
    report.close()
    server.run(sockets=[listener])
    # uvicorn has drained and the app has shut down (the batcher stopped, its threads joined): leave at once, not
    # through the interpreter's shutdown, which would wait for any thread a library left running.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def _exit_with_parent(parent: int, server: Any) -> None:
    """Drain and exit when the parent is gone (it was killed without passing on a SIGTERM)."""
    while os.getppid() == parent:
        time.sleep(1.0)
    server.should_exit = True
