"""``vaswani serve-bench``, the driving half: real ``vaswani serve`` processes on 127.0.0.1 under closed-loop load,
and the ceilings measured in the same run (:mod:`vaswani.tools.serve_ceilings`). :mod:`vaswani.tools.serve_report`
turns what this gathers into files.

What one run measures, every timed drive interleaved with its rivals (A B, then B A, …) so that a drift in the
machine's load favours none of them:

- **batching against none**: two servers of the same thread layout, one batching requests and one searching each
  sentence alone, driven by each ``--clients`` level of closed-loop clients (each sends one Multi30k test sentence
  per request on its kept-alive connection, and the next as soon as the answer arrives);
- **thread layouts**: at the largest level, a batching server per ``--layouts`` entry (workers × parallel batches
  × threads per batch), against a bare CTranslate2 script (ctranslate2 + tokenizers, nothing of vaswani) that
  translates the same sentences in batches of that size on the same number of threads;
- **ceilings**: ``GET /health`` at each level (the HTTP stack and this load generator alone: no model time), and
  the server's batcher called in this process with no HTTP at each level (the model alone), which bounds the
  latency N closed-loop clients can see: N / its rate.

Nothing leaves the machine and every run stops by itself.
"""

from __future__ import annotations

import asyncio
import json
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vaswani.data.corpora import load_corpus
from vaswani.decoding.config import StoredSearch
from vaswani.errors import VaswaniError
from vaswani.model.serialization import resolve_checkpoint
from vaswani.provenance import Provenance, load_averages, provenance, usable_cores
from vaswani.records import from_json
from vaswani.serve.settings import ServeSettings
from vaswani.tools.serve_ceilings import BareRun, BareScript, ModelAlone, drive_batcher
from vaswani.tools.serve_layouts import Layout, layouts_for, runnable_layouts
from vaswani.tools.serve_report import save_screenshots, write_report

MODES = {"batching": [], "no batching": ["--no-batching"]}
READY_LINE = re.compile(r"^vaswani serve: http://", re.MULTILINE)


@dataclass
class Run:
    """One timed drive of one server (or of its GET /health) by ``clients`` closed-loop clients."""

    server: str  # "batching", "no batching", a layout's name, or "health" (GET /health)
    clients: int
    repeat: int
    requests: int  # answered (200); one sentence each
    seconds: float
    per_s: float
    p50_ms: float | None
    p95_ms: float | None
    p99_ms: float | None
    errors: int
    error_examples: list[str] = field(default_factory=list)
    load_average: float | None = None  # the machine's, over the minute before the run ended (other jobs included)


@dataclass
class LoadTest:
    """Everything one `vaswani serve-bench` measured, with what it ran on."""

    provenance: Provenance
    setup: dict[str, Any]
    model: dict[str, Any]  # the batching server's /v1/model
    runs: list[Run]  # batching and no batching at every level
    health_runs: list[Run]
    layout_runs: list[Run]
    bare_runs: list[BareRun]
    model_alone: list[ModelAlone]
    screenshots: list[str]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Server:
    """`vaswani serve` in a subprocess on a free loopback port, ready once every worker is (it printed its address)
    and /health answers."""

    def __init__(self, checkpoint: str | Path, flags: list[str]):
        import httpx

        self.url = f"http://127.0.0.1:{_free_port()}"
        port = self.url.rsplit(":", 1)[1]
        # Its output (an access-log line per request) goes to a file: a pipe nobody reads would fill and block it.
        self.log = tempfile.TemporaryFile(mode="w+", encoding="utf-8")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "vaswani.cli", "serve", "--checkpoint", str(checkpoint), "--port", port, *flags],
            stdout=self.log, stderr=subprocess.STDOUT, text=True,
        )
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise VaswaniError(f"the server did not start: {startup_error(self.output())}")
            if READY_LINE.search(self.output()):
                try:
                    if httpx.get(self.url + "/health", timeout=1).status_code == 200:
                        return
                except httpx.TransportError:
                    pass
            time.sleep(0.2)
        self.stop()
        raise VaswaniError("the server was not ready after 120 s")

    def output(self) -> str:
        self.log.seek(0)
        return self.log.read()

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.process.kill()
        self.log.close()


SERVE_ERROR = "vaswani serve: error: "


def startup_error(output: str) -> str:
    """Why a `vaswani serve` that exited at start-up stopped, in one line: its own error message, or else the last
    line of what it printed (a bug's traceback ends with the exception) and where to see the rest."""
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    for line in reversed(lines):
        if line.startswith(SERVE_ERROR):
            return line.removeprefix(SERVE_ERROR)
    if not lines:
        return "it exited without a message"
    return f"{lines[-1]} (run `vaswani serve` with the same --checkpoint to see all it printed)"


class Connection:
    """One kept-alive HTTP/1.1 connection of a load-generating client; h11 frames the messages.

    Lean on purpose: the load generator shares the cores with the server, so its own cost per request comes out of
    the rate it measures. httpx's client spends several milliseconds of CPU on a request; this one a few tenths."""

    def __init__(self, host: str, port: int):
        self.host, self.port = host, port
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None
        self.protocol: Any = None

    async def request(self, method: str, path: str, body: bytes = b"") -> tuple[int, bytes]:
        """(status, body) of one request; the connection is opened, or opened again after an error, as needed."""
        import h11

        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
            self.protocol = h11.Connection(h11.CLIENT)
        headers = [("Host", f"{self.host}:{self.port}")]
        if body:
            headers += [("Content-Type", "application/json"), ("Content-Length", str(len(body)))]
        try:
            data = self.protocol.send(h11.Request(method=method, target=path, headers=headers))
            data += (self.protocol.send(h11.Data(data=body)) if body else b"") + self.protocol.send(h11.EndOfMessage())
            self.writer.write(data)
            status, chunks = 0, []
            while True:
                event = self.protocol.next_event()
                if event is h11.NEED_DATA:
                    received = await self.reader.read(65536)
                    if not received:
                        raise ConnectionError("the server closed the connection")
                    self.protocol.receive_data(received)
                elif isinstance(event, h11.Response):
                    status = event.status_code
                elif isinstance(event, h11.Data):
                    chunks.append(bytes(event.data))
                elif isinstance(event, h11.EndOfMessage):
                    self.protocol.start_next_cycle()
                    return status, b"".join(chunks)
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
        self.reader = self.writer = self.protocol = None


def percentile(ordered: list[float], q: float) -> float | None:
    """The ``q`` quantile of sorted seconds, in milliseconds (None for no values)."""
    return 1000 * ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else None


async def drive(url: str, clients: int, seconds: float, sentences: list[str], beam: int, server: str = "",
                repeat: int = 0, health: bool = False) -> Run:
    """``clients`` closed-loop clients for ``seconds``, each on a kept-alive connection; requests still running at
    the deadline are waited for. With ``health``, they ask GET /health instead: an answer that costs no model time,
    so its rate is what the HTTP stack and this load generator allow on the machine, the ceiling of any
    translation rate."""
    host, port = url.removeprefix("http://").rsplit(":", 1)
    bodies = [json.dumps({"text": text, "beam": beam}).encode() for text in sentences]
    latencies: list[float] = []
    errors: list[str] = []
    next_sentence = 0
    started = time.perf_counter()
    deadline = started + seconds

    async def client() -> None:
        nonlocal next_sentence
        connection = Connection(host, int(port))
        while time.perf_counter() < deadline:
            body = bodies[next_sentence % len(bodies)]
            next_sentence += 1
            sent = time.perf_counter()
            try:
                status, answer = await asyncio.wait_for(
                    connection.request("GET", "/health") if health else
                    connection.request("POST", "/v1/translate", body), timeout=120)
                if status == 200:
                    latencies.append(time.perf_counter() - sent)
                else:
                    errors.append(f"{status} {answer[:200].decode(errors='replace')}")
            except (OSError, asyncio.TimeoutError, ValueError) as error:  # h11's errors are ValueErrors
                errors.append(repr(error))
        connection.close()

    await asyncio.gather(*(client() for _ in range(clients)))
    elapsed = time.perf_counter() - started
    ordered = sorted(latencies)
    return Run("health" if health else server, clients, repeat, len(latencies), round(elapsed, 3),
               round(len(latencies) / elapsed, 3), percentile(ordered, 0.50), percentile(ordered, 0.95),
               percentile(ordered, 0.99), len(errors), errors[:3], next(iter(load_averages()), None))


def run_load_test(
    checkpoint: str | Path,
    clients: list[int],
    seconds: float,
    beam: int,
    n_sentences: int,
    out: Path,
    data_dir: Path | None = None,
    repeats: int = 2,
    engine_flags: list[str] | None = None,
    settings: ServeSettings | None = None,
    layouts: list[Layout] | None = None,
) -> LoadTest:
    """Measure, then write ``out`` (:func:`vaswani.tools.serve_report.write_report`). ``engine_flags`` (e.g.
    --engine, --quantization, --threads) go to every server; ``settings`` are the same for the in-process batcher;
    ``layouts``: the thread layouts compared at the largest level (None: :func:`layouts_for` the usable cores)."""
    import torch


    stamp = provenance("cpu")  # before anything is written: the tree is still the committed one
    settings = settings or ServeSettings()
    engine_flags = engine_flags or []
    cores = usable_cores()
    layouts = layouts if layouts is not None else layouts_for(cores)
    sentences = load_corpus("multi30k", "test2016", data_dir=data_dir).source[:n_sentences]
    top = max(clients)
    runs: list[Run] = []
    health_runs: list[Run] = []
    layout_runs: list[Run] = []

    def interleaved(servers: dict[str, Server], level: int, repeat: int, into: list[Run]) -> None:
        order = list(servers.items())
        if repeat % 2:  # A B, then B A: a drift in the machine's load favours neither
            order.reverse()
        for name, server in order:
            run = asyncio.run(drive(server.url, level, seconds, sentences, beam, name, repeat))
            into.append(run)
            print(f"{name:>12} {level:>3} clients, repeat {repeat}: {run.per_s:.2f} sentences/s, "
                  f"p95 {run.p95_ms or 0:.0f} ms, errors {run.errors}", flush=True)

    servers = {mode: Server(checkpoint, [*flags, *engine_flags]) for mode, flags in MODES.items()}
    try:
        for server in servers.values():  # warm-up: first calls pay for lazy initialisation
            asyncio.run(drive(server.url, 2, 2.0, sentences, beam))
        for level in clients:
            for repeat in range(repeats):
                interleaved(servers, level, repeat, runs)
                health_runs.append(asyncio.run(drive(servers["batching"].url, level, seconds, sentences, beam,
                                                     repeat=repeat, health=True)))
        screenshots = save_screenshots(servers["batching"].url, out)
        import httpx

        model = httpx.get(servers["batching"].url + "/v1/model", timeout=30).json()
    finally:
        for server in servers.values():
            server.stop()

    # Thread layouts at the largest level, each a batching server of its own, started together and driven in turn,
    # and in each repeat the bare script on the same threads (the servers idle meanwhile).
    chosen = _without_layout_flags(engine_flags)
    layouts, left_out = runnable_layouts(layouts, model.get("engine"))
    if left_out:
        names = ", ".join(layout.name for layout in left_out)
        print(f"serve-bench: leaving out layout(s) {names}: the server runs the torch engine, which "
              "searches one batch at a time", file=sys.stderr, flush=True)
    bare_runs: list[BareRun] = []
    with tempfile.TemporaryDirectory() as workdir:
        bare = None
        if model.get("engine") == "ctranslate2":
            threads = max(layout.total_threads for layout in layouts) if layouts else cores
            search = from_json(StoredSearch, model.get("search") or {}, "the server's /v1/model search")
            bare = BareScript(model["model"], search, resolve_checkpoint(checkpoint), sentences, beam, top, threads,
                              seconds, Path(workdir))
            bare.calibrate()
        rivals = {layout.name: Server(checkpoint, [*chosen, *layout.flags()]) for layout in layouts}
        try:
            for server in rivals.values():
                asyncio.run(drive(server.url, top, 2.0, sentences, beam))
            for repeat in range(repeats):
                interleaved(rivals, top, repeat, layout_runs)
                bare_runs += bare.runs(repeat) if bare is not None else []
        finally:
            for server in rivals.values():
                server.stop()

    # The model alone, once every server has stopped (so it has the cores to itself, as the servers had).
    model_alone = asyncio.run(drive_batcher(checkpoint, settings, clients, seconds, sentences, beam))
    test = LoadTest(
        provenance=stamp,
        setup={
            "checkpoint": str(checkpoint), "beam": beam, "seconds_per_run": seconds, "repeats": repeats,
            "sentences": f"first {len(sentences)} sources of Multi30k test2016, cycled",
            "server_flags": engine_flags, "cores_visible": cores, "torch_threads_client": torch.get_num_threads(),
            "layouts": [layout.name for layout in layouts],
            "layouts_left_out": {layout.name: "the torch engine searches one batch at a time"
                                 for layout in left_out},
            "note": "server and load generator run on the same machine and share its cores",
        },
        model=model, runs=runs, health_runs=health_runs, layout_runs=layout_runs, bare_runs=bare_runs,
        model_alone=model_alone, screenshots=screenshots,
    )
    write_report(test, out)
    return test


def _without_layout_flags(flags: list[str]) -> list[str]:
    """``flags`` without the thread layout's (--workers, --parallel-batches, --threads and their values)."""
    kept, skip = [], False
    for flag in flags:
        if skip:
            skip = False
        elif flag in ("--workers", "--parallel-batches", "--threads"):
            skip = True
        else:
            kept.append(flag)
    return kept

