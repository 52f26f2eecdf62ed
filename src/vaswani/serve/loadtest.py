"""``vaswani serve-bench``: a bounded loopback load test of ``vaswani serve``, with and without request batching.

Two server processes are started on 127.0.0.1 (one batching, one searching each sentence alone) and driven in
turn — A B, then B A, … — by N concurrent clients for a fixed number of seconds per level, each client sending one
Multi30k test sentence per request on its kept-alive connection and the next as soon as the answer arrives.
Nothing leaves the machine and the run stops by itself. Written to ``--out``: results.json (every repeat, with
provenance), table.md, throughput.png, README.md, and screenshots of the page when Playwright and chromium are
installed.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from vaswani.decoding.config import EngineOptions
from vaswani.errors import VaswaniError
from vaswani.io import atomic_write_json, atomic_write_text
from vaswani.serve.settings import ServeSettings

MODES = {"batching": [], "no batching": ["--no-batching"]}


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Server:
    """`vaswani serve` in a subprocess on a free loopback port."""

    def __init__(self, checkpoint: str | Path, flags: list[str], threads: int):
        import httpx

        self.url = f"http://127.0.0.1:{_free_port()}"
        port = self.url.rsplit(":", 1)[1]
        self.process = subprocess.Popen(
            [sys.executable, "-m", "vaswani.cli", "serve", "--checkpoint", str(checkpoint), "--port", port,
             "--threads", str(threads), *flags],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        )
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise VaswaniError(f"the server did not start: {startup_error(self.process.stderr.read())}")
            try:
                if httpx.get(self.url + "/health", timeout=1).status_code == 200:
                    return
            except httpx.TransportError:
                time.sleep(0.3)
        self.stop()
        raise VaswaniError("the server was not ready after 120 s")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.process.kill()


SERVE_ERROR = "vaswani serve: error: "


def startup_error(stderr: str) -> str:
    """Why a `vaswani serve` that exited at start-up stopped, in one line: its own error message, or else the last
    line of what it printed (a bug's traceback ends with the exception) and where to see the rest."""
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
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


async def _drive(url: str, clients: int, seconds: float, sentences: list[str], beam: int,
                 health: bool = False) -> dict[str, Any]:
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

    def percentile(q: float) -> float | None:
        return 1000 * ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else None

    return {
        "sentences": len(latencies), "seconds": round(elapsed, 3),
        "sentences_per_s": round(len(latencies) / elapsed, 3),
        "p50_ms": percentile(0.50), "p95_ms": percentile(0.95), "p99_ms": percentile(0.99),
        "errors": len(errors), "error_examples": errors[:3],
    }


async def _drive_batcher(checkpoint: str | Path, settings: ServeSettings, clients: int, seconds: float,
                         sentences: list[str], beam: int) -> dict[str, Any]:
    """``clients`` closed-loop callers of the server's batcher, in this process, for ``seconds``: the rate of the
    model thread with no HTTP, the ceiling the served rate approaches."""
    import dataclasses

    from vaswani.serve.app import load_served_model
    from vaswani.serve.batcher import Batcher

    translator = load_served_model(checkpoint, settings).translator
    config = translator.engine.bind(dataclasses.replace(translator.config, beam_size=beam))
    sources = translator.encode(sentences)
    batcher = Batcher(translator, settings)
    batcher.start()
    done, started = 0, time.perf_counter()
    deadline = started + seconds

    async def caller(first: int) -> None:
        nonlocal done
        index = first
        while time.perf_counter() < deadline:
            await batcher.translate([sources[index % len(sources)]], config)
            index, done = index + clients, done + 1

    try:
        await asyncio.gather(*(caller(i) for i in range(clients)))
    finally:
        await batcher.stop()
    elapsed = time.perf_counter() - started
    return {"clients": clients, "sentences_per_s": round(done / elapsed, 3), "batches": batcher.batches_run,
            "sentences": batcher.sentences_run, "engine": translator.engine.describe()}


def run_load_test(
    checkpoint: str | Path,
    clients: list[int],
    seconds: float,
    beam: int,
    n_sentences: int,
    out: Path,
    data_dir: Path | None = None,
    threads: int = 1,
    repeats: int = 2,
    engine: str | None = None,
    quantization: str | None = None,
) -> dict[str, Any]:
    """``engine``, ``quantization``: the servers' (None: the checkpoint's choice)."""
    import torch

    from vaswani.data.corpora import load_corpus
    from vaswani.provenance import provenance

    stamp = provenance("cpu")  # before anything is written: the tree is still the committed one
    sentences = load_corpus("multi30k", "test2016", data_dir=data_dir).source[:n_sentences]
    chosen = [flag for option, value in (("--engine", engine), ("--quantization", quantization)) if value
              for flag in (option, value)]
    servers = {mode: Server(checkpoint, [*flags, *chosen], threads) for mode, flags in MODES.items()}
    runs: list[dict[str, Any]] = []
    ceilings: list[dict[str, Any]] = []  # GET /health at the same concurrency: the HTTP stack's own limit
    try:
        for url in (s.url for s in servers.values()):  # warm-up: first calls pay for lazy initialisation
            asyncio.run(_drive(url, 2, 2.0, sentences, beam))
        for level in clients:
            for repeat in range(repeats):
                order = list(servers.items())
                if repeat % 2:  # A B, then B A: a drift in the machine's load favours neither mode
                    order.reverse()
                for mode, server in order:
                    result = asyncio.run(_drive(server.url, level, seconds, sentences, beam))
                    runs.append({"mode": mode, "clients": level, "repeat": repeat, **result})
                    print(f"{mode:>12} {level:>3} clients, repeat {repeat}: {result['sentences_per_s']:.2f} "
                          f"sentences/s, p95 {result['p95_ms'] or 0:.0f} ms, errors {result['errors']}", flush=True)
                ceiling = asyncio.run(_drive(servers["batching"].url, level, seconds, sentences, beam, health=True))
                ceilings.append({"clients": level, "repeat": repeat, "requests_per_s": ceiling["sentences_per_s"],
                                 "p95_ms": ceiling["p95_ms"]})
        screenshots = save_screenshots(servers["batching"].url, out)
        import httpx

        model = httpx.get(servers["batching"].url + "/v1/model", timeout=30).json()
    finally:
        for server in servers.values():
            server.stop()

    # The model thread alone: the batcher searched in this process at the largest level, with no HTTP at all (the
    # servers have stopped, so it has the cores to itself, as the servers had).
    options = EngineOptions(engine=engine, quantization=quantization, threads=threads)
    settings = ServeSettings(engine_options=options)
    model_alone = asyncio.run(_drive_batcher(checkpoint, settings, max(clients), seconds, sentences, beam))
    rows = summarise(runs, clients)
    results = {
        "provenance": stamp,
        "setup": {
            "checkpoint": str(checkpoint), "beam": beam, "seconds_per_run": seconds, "repeats": repeats,
            "sentences": f"first {len(sentences)} sources of Multi30k test2016, cycled",
            "server_threads": threads, "cores_visible": os.cpu_count(), "torch_threads_client": torch.get_num_threads(),
            "note": "server and load generator run on the same machine and share its cores",
        },
        "model": model, "rows": rows, "runs": runs, "screenshots": screenshots,
        "http_ceiling": [{"clients": level, "requests_per_s": statistics.median(
            c["requests_per_s"] for c in ceilings if c["clients"] == level)} for level in clients],
        "http_ceiling_runs": ceilings,
        "model_thread_alone": model_alone,
    }
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_json(out / "results.json", results)
    atomic_write_text(out / "table.md", table(results))
    plot(rows, out / "throughput.png")
    atomic_write_text(out / "README.md", readme(results))
    print(f"wrote {out}/results.json, table.md, throughput.png, README.md")
    return results


def summarise(runs: list[dict[str, Any]], clients: list[int]) -> list[dict[str, Any]]:
    """Per mode and level: the median over repeats, the spread (min–max), and the speed-up of batching."""
    rows = []
    for level in clients:
        for mode in MODES:
            mine = [r for r in runs if r["mode"] == mode and r["clients"] == level]
            rate = [r["sentences_per_s"] for r in mine]
            row = {"mode": mode, "clients": level, "sentences_per_s": statistics.median(rate),
                   "sentences_per_s_min": min(rate), "sentences_per_s_max": max(rate),
                   "errors": sum(r["errors"] for r in mine)}
            for key in ("p50_ms", "p95_ms", "p99_ms"):
                values = [r[key] for r in mine if r[key] is not None]
                row[key] = statistics.median(values) if values else None
            rows.append(row)
        batched = rows[-2]
        ratios = sorted(
            a["sentences_per_s"] / b["sentences_per_s"]
            for a in runs if a["mode"] == "batching" and a["clients"] == level
            for b in runs if b["mode"] == "no batching" and b["clients"] == level and b["repeat"] == a["repeat"]
            if b["sentences_per_s"] > 0
        )
        batched["speedup"] = statistics.median(ratios) if ratios else None
        batched["speedup_range"] = [ratios[0], ratios[-1]] if ratios else None
    return rows


def _ms(value: float | None) -> str:
    return "–" if value is None else f"{value:,.0f}"


def engine_line(model: dict[str, Any]) -> str:
    """What the servers ran on, from their /v1/model: e.g. "ctranslate2 int8 on cpu"."""
    engine = model.get("engine") or "torch"
    return " ".join(part for part in (engine, model.get("quantization"), "on", model.get("device") or "cpu") if part)


def table(results: dict[str, Any]) -> str:
    setup, prov = results["setup"], results["provenance"]
    lines = [
        "# `vaswani serve` under load (loopback)",
        "",
        f"Beam {setup['beam']}, one sentence per request, {setup['seconds_per_run']:.0f} s per run, "
        f"{setup['repeats']} repeats interleaved A B, B A (medians; min–max in brackets). "
        f"**The server and the load generator share the machine's {setup['cores_visible']} cores** "
        f"(server: {engine_line(results.get('model') or {})}, {setup['server_threads']} thread"
        f"{'s' if setup['server_threads'] > 1 else ''}).",
        "",
        "| clients | mode | sentences/s | batching speed-up | p50 ms | p95 ms | p99 ms | errors |",
        "|---:|---|---:|---:|---:|---:|---:|---:|",
    ]
    ceilings = {c["clients"]: c["requests_per_s"] for c in results.get("http_ceiling", [])}
    for row in results["rows"]:
        speedup = "" if row.get("speedup") is None else (
            f"{row['speedup']:.2f}× ({row['speedup_range'][0]:.2f}–{row['speedup_range'][1]:.2f})")
        lines.append(
            f"| {row['clients']} | {row['mode']} | {row['sentences_per_s']:.2f} "
            f"({row['sentences_per_s_min']:.2f}–{row['sentences_per_s_max']:.2f}) | {speedup} | "
            f"{_ms(row['p50_ms'])} | {_ms(row['p95_ms'])} | {_ms(row['p99_ms'])} | {row['errors']} |")
    if ceilings:
        lines += ["", "The ceiling of any rate above: the same clients asking `GET /health`, which costs no model time "
                  "(the HTTP stack and the load generator alone, on the same cores): "
                  + ", ".join(f"{ceilings[level]:.0f} requests/s at {level} client{'s' if level > 1 else ''}"
                              for level in sorted(ceilings)) + "."]
    alone = results.get("model_thread_alone")
    if alone:
        lines += ["", f"The model thread alone (the server's batcher called in one process, no HTTP, "
                  f"{alone['clients']} callers): {alone['sentences_per_s']:.0f} sentences/s, "
                  f"{alone['sentences'] / max(alone['batches'], 1):.1f} sentences per batch."]
    hardware = prov["hardware"]
    lines += ["", f"Command: `{prov['command']}` · commit {prov['git'].get('commit', '?')[:10]}"
              f"{' (dirty tree)' if prov['git'].get('dirty') else ''} · {hardware.get('processor', '')}, {hardware.get('cpu_count', '?')} cores", ""]
    return "\n".join(lines)


def readme(results: dict[str, Any]) -> str:
    """Findings in prose, every number read from the rows."""
    rows = results["rows"]
    batched = [r for r in rows if r["mode"] == "batching"]
    alone = [r for r in rows if r["mode"] == "no batching"]
    most = max(batched, key=lambda r: r["clients"])
    least = min(batched, key=lambda r: r["clients"])
    alone_most = next(r for r in alone if r["clients"] == most["clients"])
    errors = sum(r["errors"] for r in rows)
    text = [
        "# Serving under load",
        "",
        "Written by `vaswani serve-bench` (see `table.md` for every level and `results.json` for every run).",
        "",
        f"- With {most['clients']} concurrent clients, request batching serves **{most['sentences_per_s']:.2f}** "
        f"sentences/s against **{alone_most['sentences_per_s']:.2f}** one sentence at a time: "
        f"{most['speedup']:.2f}× (per-repeat range {most['speedup_range'][0]:.2f}–{most['speedup_range'][1]:.2f}); "
        f"p95 latency {_ms(most['p95_ms'])} ms against {_ms(alone_most['p95_ms'])} ms.",
        f"- With {least['clients']} client(s) there is nothing to batch: {least['sentences_per_s']:.2f} against "
        f"{next(r for r in alone if r['clients'] == least['clients'])['sentences_per_s']:.2f} sentences/s, "
        f"{least['speedup']:.2f}× ({_lone_client_verdict(least['speedup_range'])}).",
        f"- Errors over all runs: **{errors}**.",
        "- The server and the load generator share the same cores (and, on the machine that wrote these files, "
        "other jobs), so the absolute rates are low and noisy; the ratios were measured with the two servers "
        "driven in turn (A B, B A, …) in one process.",
        "",
        "![throughput and latency](throughput.png)",
        "",
    ]
    model = results.get("model") or {}
    if results.get("screenshots"):
        bleu = model.get("val_bleu")
        which = (f"step {model['step']}" if model.get("step") is not None else model.get("weights")) or "no step known"
        score = ("validation BLEU unknown" if bleu is None else
                 f"validation BLEU {bleu:.1f} on {model.get('val_bleu_on') or 'the validation split'}")
        text += [
            f"The screenshots show the page serving `{model.get('id')}` ({which}, {score}) and the beam-4 "
            "translation of the sentence typed; one target row is clicked, which lights up its source tokens.",
            "",
        ]
        text += [f"![the attention page]({shot})" for shot in results["screenshots"]] + [""]
    return "\n".join(text)


def _lone_client_verdict(ratio_range: list[float] | None) -> str:
    if not ratio_range:
        return "no ratio"
    low, high = ratio_range
    if low <= 1.0 <= high:
        return f"per-repeat ratios {low:.2f}–{high:.2f} straddle 1: no difference beyond the noise"
    if high < 1.0:
        return f"per-repeat ratios {low:.2f}–{high:.2f}: the gathering wait costs a lone client"
    return f"per-repeat ratios {low:.2f}–{high:.2f}, above 1 although a lone client has nothing to batch: noise"


def plot(rows: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(9, 3.6))
    for mode, marker in zip(MODES, ("o", "s")):
        mine = [r for r in rows if r["mode"] == mode]
        levels = [r["clients"] for r in mine]
        left.plot(levels, [r["sentences_per_s"] for r in mine], marker=marker, label=mode)
        left.fill_between(levels, [r["sentences_per_s_min"] for r in mine], [r["sentences_per_s_max"] for r in mine],
                          alpha=0.2)
        right.plot(levels, [(r["p95_ms"] or 0) / 1000 for r in mine], marker=marker, label=mode)
    levels = sorted({r["clients"] for r in rows})
    for axis, label in ((left, "sentences / s"), (right, "p95 latency (s)")):
        axis.set_xscale("log", base=2)
        axis.set_xticks(levels, [str(level) for level in levels])
        axis.set_xlabel("concurrent clients")
        axis.set_ylabel(label)
        axis.grid(alpha=0.3)
    left.legend()
    fig.suptitle("vaswani serve on loopback (server and clients share the cores)", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


SCREENSHOT_SENTENCE = "Ein Mann mit einem roten Hut spielt Gitarre auf der Straße."


def save_screenshots(url: str, out: Path) -> list[str]:
    """The page with a translation and its heatmap, at laptop and phone widths (skipped without a browser)."""
    try:
        from playwright.sync_api import sync_playwright
    except ModuleNotFoundError:
        print("no playwright: screenshots skipped", file=sys.stderr)
        return []
    chromium = "/usr/bin/chromium"
    if not Path(chromium).exists():
        print("no /usr/bin/chromium: screenshots skipped", file=sys.stderr)
        return []
    out.mkdir(parents=True, exist_ok=True)
    names = []
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium, headless=True, args=["--no-sandbox"])
        try:
            for name, viewport in (("page.png", {"width": 1280, "height": 900}),
                                   ("page-phone.png", {"width": 390, "height": 844})):
                page = browser.new_page(viewport=viewport, device_scale_factor=2 if "phone" in name else 1)
                page.set_default_timeout(60_000)
                page.goto(url + "/")
                page.fill("#source", SCREENSHOT_SENTENCE)
                page.check("#nbest")
                page.click("#translate-button")
                page.wait_for_selector("#attention:not([hidden])")
                targets = page.locator("#heatmap .hm-target .hm-tgt")
                targets.nth(min(2, targets.count() - 1)).click()  # pin one row: its source tokens light up
                page.screenshot(path=str(out / name), full_page=True)
                page.close()
                names.append(name)
        finally:
            browser.close()
    return names
