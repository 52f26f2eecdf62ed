"""``vaswani serve-bench``, the ceilings a served rate is measured against in the same run: the server's batcher
called in one process with no HTTP (the model alone), and a bare CTranslate2 script (ctranslate2 + tokenizers,
nothing of vaswani) translating the same sentences in batches of the same size on the same threads."""

from __future__ import annotations

import asyncio
import dataclasses
import math
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from vaswani.decoding.config import StoredSearch
from vaswani.errors import VaswaniError
from vaswani.serve.app import load_served_model
from vaswani.serve.batcher import Batcher
from vaswani.serve.settings import ServeSettings

BARE_SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "bare_ctranslate2.py"
BARE_ORDERS = {"sorted": [], "in arrival order": ["--in-order"]}


@dataclass
class ModelAlone:
    """The server's batcher called in one process, with no HTTP, by ``clients`` closed-loop callers."""

    clients: int
    sentences_per_s: float
    batches: int
    sentences: int


@dataclass
class BareRun:
    """The bare CTranslate2 script translating the sentences in batches of ``batch`` on ``inter × intra``
    threads, start-up excluded (its run on an empty input is subtracted): sorted by length, as a batch job may, or
    in arrival order, as a server must."""

    layout: str  # "inter x intra, order", e.g. "2x1, sorted"
    repeat: int
    batch: int
    sentences: int
    seconds: float
    sentences_per_s: float


async def drive_batcher(checkpoint: str | Path, settings: ServeSettings, levels: list[int], seconds: float,
                        sentences: list[str], beam: int) -> list[ModelAlone]:
    """At each level, that many closed-loop callers of the server's batcher in this process for ``seconds``: the
    rate of the model with no HTTP, the ceiling the served rate approaches."""
    served = load_served_model(checkpoint, settings)
    translator = served.translator
    config = translator.engine.bind(dataclasses.replace(translator.config, beam_size=beam))
    sources = translator.encode(sentences)
    results = []
    for clients in levels:
        batcher = Batcher(served.translators, settings)
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
        results.append(ModelAlone(clients, round(done / elapsed, 3), batcher.batches_run, batcher.sentences_run))
    return results


class BareScript:
    """The bare CTranslate2 script on the servers' converted model ``converted`` with their ``search``, in batches
    of ``batch``, on ``threads`` threads spent as one batch at a time (inter 1 × intra ``threads``) or several at
    once (inter ``threads`` × intra 1), with the sentences sorted by length or in arrival order. Each run's input is
    the sentences repeated to last about ``seconds`` (:meth:`calibrate` finds how many copies do), and its start-up
    (the same command on an empty input) is subtracted."""

    def __init__(self, converted: str, search: StoredSearch, checkpoint: Path, sentences: list[str], beam: int,
                 batch: int, threads: int, seconds: float, work: Path):
        power = search.length_norm == "power" and search.alpha is not None
        self.options = ["--beam", str(beam), "--length-penalty", repr(search.alpha if power else 1.0),
                        "--max-len-a", repr(1.5 if search.max_len_a is None else search.max_len_a), "--max-len-b",
                        str(10 if search.max_len_b is None else search.max_len_b), "--batch-size", str(batch)]
        self.files = [converted, str(checkpoint / "tokenizer.json")]
        self.sentences, self.batch, self.seconds, self.work = sentences, batch, seconds, work
        self.layouts = [(inter, intra, order) for inter, intra in sorted({(1, threads), (threads, 1)})
                        for order in BARE_ORDERS]
        self.copies = dict.fromkeys(self.layouts, 1)

    def _timed(self, inter: int, intra: int, order: str, lines: list[str]) -> float:
        source, out = self.work / "source.txt", self.work / "out.txt"
        source.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
        command = [sys.executable, str(BARE_SCRIPT), *self.files, str(source), str(out), *self.options, "--threads",
                   str(intra), "--inter-threads", str(inter), *BARE_ORDERS[order]]
        started = time.perf_counter()
        done = subprocess.run(command, capture_output=True, text=True)
        if done.returncode != 0:
            lines = [line for line in done.stderr.splitlines() if line.strip()]
            raise VaswaniError(f"the bare CTranslate2 script failed: {lines[-1] if lines else done.returncode}")
        return time.perf_counter() - started

    def calibrate(self) -> None:
        """Untimed: how many copies of the sentences each layout translates in about ``seconds``."""
        for layout in self.layouts:
            rate = len(self.sentences) / max(self._timed(*layout, self.sentences) - self._timed(*layout, []), 1e-3)
            self.copies[layout] = max(1, math.ceil(self.seconds * rate / len(self.sentences)))

    def runs(self, repeat: int) -> list[BareRun]:
        """One timed run of each layout, in an order that turns around from one repeat to the next."""
        found = []
        for inter, intra, order in self.layouts if repeat % 2 == 0 else self.layouts[::-1]:
            lines = self.sentences * self.copies[inter, intra, order]
            taken = max(self._timed(inter, intra, order, lines) - self._timed(inter, intra, order, []), 1e-3)
            found.append(BareRun(f"{inter}x{intra}, {order}", repeat, self.batch, len(lines), round(taken, 3),
                                 round(len(lines) / taken, 3)))
            print(f"bare script {found[-1].layout}, repeat {repeat}: {found[-1].sentences_per_s:.2f} sentences/s",
                  flush=True)
        return found
