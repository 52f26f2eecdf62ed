"""`vaswani serve --workers N`: N processes behind one port, each with its own engine; /health and /v1/model
say which answered, SIGTERM drains every worker, a worker's start-up error is the server's one line, and a
worker that dies while serving is started again while the others keep answering."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

from vaswani.serve.workers import (
    DRAIN_SECONDS,
    FAST_EXIT_SECONDS,
    FIRST_RESTART_SECONDS,
    LONGEST_RESTART_SECONDS,
    MAX_FAST_EXITS,
    RestartPolicy,
)

SRC = Path(__file__).resolve().parents[2] / "src"
pytestmark = pytest.mark.slow


def _ready(server) -> None:  # noqa: ANN001 - conftest's ServerProcess
    """Wait for the line the parent prints once every worker has loaded its model."""
    deadline = time.monotonic() + 120
    while "vaswani serve: http://" not in server.output():
        assert server.process.poll() is None and time.monotonic() < deadline, server.output()
        time.sleep(0.1)


@pytest.fixture(scope="module")
def two_workers(tiny_checkpoint, start_server):
    server = start_server(tiny_checkpoint, "--workers", "2", "--threads", "2", "--device", "cpu",
                          "--force-workers")
    _ready(server)
    yield server
    server.stop()


def test_two_workers_behind_one_port_both_answer_and_say_which(two_workers) -> None:
    seen: dict[int, int] = {}
    for _ in range(200):  # a new connection each time: the kernel hands each to one worker
        health = httpx.get(f"{two_workers.url}/health", timeout=10).json()
        assert health["status"] == "ready" and health["workers"] == 2
        seen[health["worker"]] = health["pid"]
        if len(seen) == 2:
            break
    assert sorted(seen) == [1, 2] and len(set(seen.values())) == 2, seen
    model = httpx.get(f"{two_workers.url}/v1/model", timeout=10).json()
    assert model["workers"] == 2 and model["worker"] in (1, 2) and model["pid"] == seen[model["worker"]]
    assert model["threads"] == 1 and model["parallel_batches"] == 1  # --threads 2 split between the two workers
    answer = httpx.post(f"{two_workers.url}/v1/translate", json={"text": "Ein Hund."}, timeout=30)
    assert answer.status_code == 200 and isinstance(answer.json()["translation"], str)


def test_sigterm_drains_every_worker(tiny_checkpoint, start_server) -> None:
    server = start_server(tiny_checkpoint, "--workers", "2", "--threads", "2", "--device", "cpu",
                          "--force-workers")
    _ready(server)
    answers: list[httpx.Response | Exception] = []
    workers = {}

    def client(n: int) -> None:
        try:  # 8 texts at beam 4 up to 40 tokens: in flight for a while on a random model
            body = {"texts": [f"{n}: Ein Mann fährt Fahrrad."] * 8, "beam": 4, "max_len_a": 0.0, "max_len_b": 40}
            answers.append(httpx.post(f"{server.url}/v1/translate", json=body, timeout=60))
        except Exception as error:  # noqa: BLE001 - recorded and asserted below
            answers.append(error)

    while len(workers) < 2:  # both workers' pids, to check that both are gone at the end
        health = httpx.get(f"{server.url}/health", timeout=10).json()
        workers[health["worker"]] = health["pid"]
    threads = [threading.Thread(target=client, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    deadline, in_flight = time.monotonic() + 10, 0
    while in_flight == 0 and time.monotonic() < deadline:  # at least one request reached a worker
        in_flight = httpx.get(f"{server.url}/health", timeout=5).json()["in_flight"]
    time.sleep(0.2)  # and the rest have been accepted (a request not yet accepted would rightly be refused)
    server.process.send_signal(signal.SIGTERM)
    for thread in threads:
        thread.join(timeout=90)
    # The server's own bound: a worker still running DRAIN_SECONDS after uvicorn began to drain is killed 10 s later
    # (a search in flight on a loaded machine may hold a worker's exit for a while).
    try:
        server.process.wait(timeout=DRAIN_SECONDS + 10 + 20)
    except subprocess.TimeoutExpired:
        pass
    log = server.stop()

    # the status of one worker's server, whose uvicorn raises the SIGTERM again once drained
    # (test_shutdown.py)
    assert server.process.returncode == -signal.SIGTERM, log
    assert len(answers) == 8 and all(isinstance(a, httpx.Response) and a.status_code == 200 for a in answers), answers
    assert log.count("Finished server process") == 2, log  # each worker's uvicorn drained and finished
    for pid in workers.values():
        assert not _alive(pid), f"worker {pid} outlived the server"


def test_a_killed_worker_is_started_again_while_the_port_keeps_answering(tiny_checkpoint,
                                                                          start_server) -> None:
    server = start_server(tiny_checkpoint, "--workers", "2", "--threads", "2", "--device", "cpu",
                          "--force-workers")
    try:
        _ready(server)
        pids: dict[int, int] = {}
        while len(pids) < 2:
            health = httpx.get(f"{server.url}/health", timeout=10).json()
            pids[health["worker"]] = health["pid"]
        # Under load: one client translating all along. At most its one request in flight on the killed worker
        # may be lost; every other is answered.
        statuses: list[int | str] = []
        loading = threading.Event()

        def load() -> None:
            body = {"text": "Ein Mann fährt Fahrrad.", "max_len_a": 0.0, "max_len_b": 8}
            while not loading.is_set():
                try:
                    answer = httpx.post(f"{server.url}/v1/translate", json=body, timeout=30)
                    statuses.append(answer.status_code)
                except httpx.TransportError as error:  # the connection the killed worker held
                    statuses.append(type(error).__name__)

        client = threading.Thread(target=load)
        client.start()
        time.sleep(0.5)
        os.kill(pids[1], signal.SIGKILL)
        answered, deadline, successor = 0, time.monotonic() + 120, None
        while successor is None:  # every request is answered, by worker 2 until worker 1 is back
            assert time.monotonic() < deadline, server.output()
            health = httpx.get(f"{server.url}/health", timeout=10)
            assert health.status_code == 200, health.text
            answered += 1
            if health.json()["worker"] == 1 and health.json()["pid"] != pids[1]:
                successor = health.json()["pid"]
            time.sleep(0.05)
        loading.set()
        client.join(timeout=60)
        assert server.process.poll() is None and answered > 1
        lost = [status for status in statuses if status != 200]
        assert len(statuses) > 2 and len(lost) <= 1 and all(isinstance(s, str) for s in lost), statuses
        log = server.output()
        # one line, its pause that of a worker that dies within FAST_EXIT_SECONDS of its start (RestartPolicy)
        assert (f"vaswani serve: worker 1 (pid {pids[1]}) exited (killed by SIGKILL); starting it again in "
                f"{2 * FIRST_RESTART_SECONDS:g} s\n") in log, log
        assert f"vaswani serve: worker 1 (pid {successor}) is serving again" in log, log
        assert "Traceback" not in log, log
        answer = httpx.post(f"{server.url}/v1/translate", json={"text": "Ein Hund."}, timeout=30)
        assert answer.status_code == 200
    finally:
        server.stop()


def test_a_worker_dying_soon_after_each_start_is_restarted_later_each_time_then_given_up() -> None:
    policy = RestartPolicy()
    assert policy.after_exit(FAST_EXIT_SECONDS + 1) == FIRST_RESTART_SECONDS  # died after serving a while
    pauses = [policy.after_exit(0.5) for _ in range(MAX_FAST_EXITS)]
    assert pauses[:-1] == [min(LONGEST_RESTART_SECONDS, FIRST_RESTART_SECONDS * 2 ** n)
                           for n in range(1, MAX_FAST_EXITS)]
    assert pauses[-1] is None  # MAX_FAST_EXITS in a row: the server stops
    policy = RestartPolicy()
    for _ in range(MAX_FAST_EXITS - 1):
        policy.after_exit(0.5)
    assert policy.after_exit(FAST_EXIT_SECONDS + 1) == FIRST_RESTART_SECONDS  # a long life resets the count


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8") as handle:
            return handle.read().split()[2] != "Z"
    except FileNotFoundError:
        return False


def test_a_workers_start_up_error_is_the_servers_one_line(tiny_checkpoint, tmp_path, port) -> None:
    checkpoint = tmp_path / "checkpoint"
    shutil.copytree(tiny_checkpoint, checkpoint)
    weights = checkpoint / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:1000])
    done = subprocess.run([sys.executable, "-m", "vaswani.cli", "serve", "--checkpoint", str(checkpoint), "--port",
                           str(port), "--workers", "2", "--threads", "2", "--device", "cpu",
                           "--force-workers"],
                          env={**os.environ, "PYTHONPATH": str(SRC)}, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"vaswani serve: error: {weights}: cannot be read as safetensors "
                                                   "weights"), done.stderr


def test_more_workers_than_threads_is_refused_before_listening(tiny_checkpoint, port, capsys) -> None:
    from vaswani.cli import main

    # --force-workers: on a machine of fewer than 3 cores, the split of the threads is what is refused
    code = main(["serve", "--checkpoint", str(tiny_checkpoint), "--port", str(port), "--workers", "3",
                 "--threads", "2", "--force-workers"])
    assert (code, capsys.readouterr().err) == (2, "vaswani serve: error: --threads 2: fewer than --workers 3; give "
                                                  "each worker at least one thread\n")


def test_more_workers_than_usable_cores_is_refused_unless_forced(tiny_checkpoint, port, capsys) -> None:
    from vaswani.cli import main
    from vaswani.provenance import usable_cores

    cores = usable_cores()
    code = main(["serve", "--checkpoint", str(tiny_checkpoint), "--port", str(port),
                 "--workers", str(cores + 1)])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith(f"vaswani serve: error: --workers {cores + 1}: more than the {cores} "
                                        "core(s)") and err.count("\n") == 1 and "--force-workers" in err
