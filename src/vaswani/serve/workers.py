"""``vaswani serve --workers N``: N processes behind one port, each with its own engine.

The parent binds the port (so a port in use is one line before anything loads), then starts the workers, each a
fresh interpreter (``spawn``) that loads the model on its share of the threads and serves the shared listening
socket with uvicorn: the kernel hands each new connection to one of them. The parent prints the address once every
worker is ready, and reports a worker's start-up error as its own one-line error (the other workers are stopped).

SIGTERM or Ctrl-C reaches the parent only (the workers are in a process group of their own, so a terminal's
Ctrl-C does not reach them twice); it sends each worker one SIGTERM, on which uvicorn stops accepting, finishes the
requests in flight and exits, and returns once all have. A worker that dies while serving stops the server with
an error, for whatever supervises it (systemd, a container runtime) to restart it whole. A worker whose parent is
gone (killed with SIGKILL) drains and exits on its own.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import sys
import socket
import threading
import time
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from typing import Any

from vaswani.errors import EnvironmentFault, VaswaniError
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


def serve_workers(listener: socket.socket, checkpoint: str, settings: ServeSettings, address: str) -> None:
    """Run ``settings.workers`` worker processes on ``listener`` until SIGTERM or Ctrl-C, then drain them all."""
    context = multiprocessing.get_context("spawn")
    pipes = [context.Pipe(duplex=False) for _ in range(settings.workers)]  # (read, write): one report each
    processes = [context.Process(target=run_worker, name=f"vaswani-worker-{number}",
                                 args=(number, listener, checkpoint, settings, pipes[number - 1][1]))
                 for number in range(1, settings.workers + 1)]
    stopping = threading.Event()

    def stop(signum: int = signal.SIGTERM, frame: Any = None) -> None:
        if not stopping.is_set():
            stopping.set()
            for process in processes:
                if process.pid is not None and process.exitcode is None:
                    os.kill(process.pid, signal.SIGTERM)

    previous = {signum: signal.signal(signum, stop) for signum in (signal.SIGTERM, signal.SIGINT)}
    try:
        for process in processes:
            process.start()
        for _, sender in pipes:
            sender.close()  # the worker holds its own end: the parent's read end sees EOF when it dies
        _wait_until_ready(processes, [receiver for receiver, _ in pipes], stopping)
        if not stopping.is_set():
            print(f"vaswani serve: {address}  ({settings.workers} workers; API docs at /docs)", flush=True)
        while any(process.exitcode is None for process in processes):
            # a second at a time, so that a stop is noticed: from then on _join bounds the wait for every worker
            ready = wait([process.sentinel for process in processes if process.exitcode is None], timeout=1.0)
            if stopping.is_set():
                break
            if ready:
                gone = next(process for process in processes if process.exitcode is not None)
                stop()
                _join(processes)
                raise EnvironmentFault(f"worker {processes.index(gone) + 1} (pid {gone.pid}) exited while serving "
                                       f"(status {gone.exitcode}); the server stopped its other workers")
    finally:
        stop()
        _join(processes)
        for signum, handler in previous.items():
            signal.signal(signum, handler)


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

    from vaswani.serve.app import create_app, load_served_model

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
