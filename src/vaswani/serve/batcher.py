"""Continuous request batching with fair turns: the sentences of concurrent requests share batches, an idle model
searches a request at once, and no request, however large, makes a short one wait for all of its sentences.

Every request becomes a *job*: its sentences, its search settings and the future its handler awaits. The batcher
owns one or more *model slots*, each a translator on a thread of its own (``parallel_batches``: more than one lets
CTranslate2 search several batches at once, each on its share of the cores). A single worker task forms batches:

- **Continuous.** When a slot is free and sentences wait, the next batch is formed at once: a lone request on an
  idle model is searched without waiting for company, and the requests that arrive while every slot is busy form
  the next batch. What waits is shared between the slots free at that moment, so several slots search side by
  side instead of one taking everything while the others idle. ``batch_wait_ms`` (0 by default) is only a ceiling
  a user may set: how long a free slot may hold the oldest waiting sentence for company before it searches a batch
  that is not full.
- **Fair turns.** Jobs take turns heading a batch, in arrival order: the head's settings are the batch's, and the
  batch takes one sentence from each job with the same settings in turn (round robin), until
  ``max_batch_sentences`` or ``max_batch_tokens`` (padded source tokens × beam) is reached. The head then goes to
  the back of the line. So a request of 32 long texts is split across batches, and a one-sentence request that
  arrives meanwhile rides in the next batch (same settings) or heads one within as many batches as there are
  jobs waiting (other settings): its wait is bounded by a few batches, never by the size of another request.
- **Cancellation.** A job whose client has gone (its handler is cancelled) leaves the line at once: its sentences
  not yet searched are never searched (``sentences_cancelled`` counts them).

Why it is exact: both engines search every sentence on its own within a batch (padding is masked, finished rows
are dropped), so a sentence gets the same translation in any batch. (One exception, on the CTranslate2 engine: an
output that reaches its length limit, see ``decoding/ct2_engine.py``.)
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from vaswani.decoding import SearchConfig, Translator
from vaswani.decoding.translator import Translation
from vaswani.serve.settings import ServeSettings


class QueueFull(Exception):
    """More sentences are waiting than ``max_queue`` allows; the client should retry later."""


@dataclass
class Job:
    """One request's sentences: those not yet in a batch (``pending``), and the answers so far."""

    sources: list[list[int]]  # ids + </s>
    config: SearchConfig
    future: asyncio.Future
    results: list[list[Translation] | None]
    pending: deque[int]  # indices of the sentences not yet taken into a batch, in order
    remaining: int  # sentences not yet answered
    arrived: float = field(default_factory=time.perf_counter)
    cancelled: bool = False


@dataclass
class Counters:
    """What /health reports of the batcher."""

    waiting: int  # sentences not yet in a batch (and attention requests not yet started)
    in_flight: int  # sentences submitted and not yet answered (waiting or being searched)
    batches_searched: int
    sentences_searched: int
    sentences_cancelled: int  # never searched: their client went away


class Batcher:
    """Owns the model slots. ``await translate(sources, config)`` from any request handler.

    ``translators``: one per slot (a single translator: one slot). Each slot searches one batch at a time on its
    own thread, so an engine's threads never compete with themselves."""

    def __init__(self, translators: Translator | Sequence[Translator], settings: ServeSettings):
        self.translators = [translators] if isinstance(translators, Translator) else list(translators)
        self.settings = settings
        self.line: deque[Job] = deque()  # jobs with sentences not yet in a batch, in the order of their turns
        self.model_threads = ThreadPoolExecutor(max_workers=len(self.translators),
                                                thread_name_prefix="vaswani-model")
        self.batches_run = 0
        self.sentences_run = 0
        self.sentences_cancelled = 0  # sentences never searched because their client went away
        self.in_flight = 0  # sentences submitted and not yet answered (queued or being searched)
        self._free: asyncio.Queue[Translator] | None = None  # the slots not searching, in the order they freed up
        self._arrived: asyncio.Event | None = None
        self._worker: asyncio.Task | None = None
        self._searches: set[asyncio.Task] = set()
        self._exclusive_waiting = 0  # attention requests, counted against the queue limit too

    # ---- lifecycle ---------------------------------------------------------------------------------------------
    def start(self) -> None:
        self._arrived = asyncio.Event()
        self._free = asyncio.Queue()
        for translator in self.translators:
            self._free.put_nowait(translator)
        self._worker = asyncio.get_running_loop().create_task(self._run(), name="vaswani-batcher")

    async def stop(self) -> None:
        for task in [self._worker, *self._searches]:
            if task is not None:
                task.cancel()
                try:
                    await task
                except asyncio.CancelledError:
                    pass
        self.model_threads.shutdown(wait=True)

    @property
    def waiting(self) -> int:
        return sum(len(job.pending) for job in self.line) + self._exclusive_waiting

    def counters(self) -> Counters:
        return Counters(self.waiting, self.in_flight, self.batches_run, self.sentences_run, self.sentences_cancelled)

    # ---- API ---------------------------------------------------------------------------------------------------
    async def translate(self, sources: Sequence[list[int]], config: SearchConfig) -> list[list[Translation]]:
        """n-best translations of ``sources`` (ids), searched together with whatever else is waiting. Cancelling
        the caller (its client went away) drops the sentences not yet searched."""
        if self.waiting + len(sources) > self.settings.max_queue:
            raise QueueFull
        job = Job(list(sources), config, asyncio.get_running_loop().create_future(), [None] * len(sources),
                  deque(range(len(sources))), len(sources))
        self.line.append(job)
        assert self._arrived is not None, "Batcher.start() was not called"
        self._arrived.set()
        self.in_flight += len(sources)
        try:
            return await job.future
        except asyncio.CancelledError:
            self._cancel(job)
            raise
        finally:
            self.in_flight -= len(sources)

    async def run_exclusive(self, work: Callable[[Translator], Any]) -> Any:
        """Run ``work(translator)`` on a free model slot, taking its turn with the batches (the attention
        endpoint), under the same queue limit."""
        if self.waiting + 1 > self.settings.max_queue:
            raise QueueFull
        assert self._free is not None, "Batcher.start() was not called"
        self._exclusive_waiting += 1
        self.in_flight += 1
        translator = None
        try:
            translator = await self._free.get()
            self._exclusive_waiting -= 1
            return await asyncio.get_running_loop().run_in_executor(self.model_threads, work, translator)
        finally:
            if translator is None:
                self._exclusive_waiting -= 1
            else:
                self._free.put_nowait(translator)
            self.in_flight -= 1

    def _cancel(self, job: Job) -> None:
        job.cancelled = True
        self.sentences_cancelled += len(job.pending)
        job.pending.clear()
        if job in self.line:
            self.line.remove(job)

    # ---- the worker --------------------------------------------------------------------------------------------
    async def _run(self) -> None:
        assert self._arrived is not None and self._free is not None
        while True:
            if not self.line:
                self._arrived.clear()
                await self._arrived.wait()
                continue
            translator = await self._free.get()  # every slot busy: what arrives meanwhile forms the next batch
            await self._gather()
            if not self.line:  # every waiting client went away meanwhile
                self._free.put_nowait(translator)
                continue
            # Share what waits between the slots free now: a batch for each, searched side by side. Otherwise
            # closed-loop clients fall into step, all waiting for one batch while the other slots stand idle.
            free = self._free.qsize() + 1
            batch = self.take_batch(max(1, -(-self.waiting // free)))
            search = asyncio.get_running_loop().create_task(self._search_and_answer(translator, batch))
            self._searches.add(search)
            search.add_done_callback(self._searches.discard)

    async def _gather(self) -> None:
        """With a ``batch_wait_ms`` ceiling: hold a free slot until the oldest waiting sentence has waited that long
        or a batch is full (0, the default: search at once)."""
        assert self._arrived is not None
        while self.line and self.waiting < self.settings.sentences_per_batch:
            oldest = min(job.arrived for job in self.line)
            delay = oldest + self.settings.wait_seconds - time.perf_counter()
            if delay <= 0:
                return
            self._arrived.clear()
            try:
                await asyncio.wait_for(self._arrived.wait(), delay)
            except asyncio.TimeoutError:
                return

    async def _search_and_answer(self, translator: Translator, batch: list[tuple[Job, int]]) -> None:
        assert self._free is not None
        loop = asyncio.get_running_loop()
        try:
            results = await loop.run_in_executor(self.model_threads, self._search, translator, batch)
        except Exception as error:  # noqa: BLE001 - answer the requests instead of killing the worker
            for job in {id(job): job for job, _ in batch}.values():
                if not job.future.done():
                    job.future.set_exception(error)
            return
        finally:
            self._free.put_nowait(translator)
        self.batches_run += 1
        self.sentences_run += len(batch)
        for (job, index), nbest in zip(batch, results):
            job.results[index] = nbest
            job.remaining -= 1
            if job.remaining == 0 and not job.future.done():  # done = cancelled: the client went away
                job.future.set_result(job.results)

    def take_batch(self, most: int | None = None) -> list[tuple[Job, int]]:
        """The next batch: headed by the first job in line, one sentence of each job with the same settings in
        turn, within both budgets (and at most ``most`` sentences). The head then goes to the back of the line; jobs
        with nothing left leave it."""
        head = self.line[0]
        config = head.config
        limit = min(self.settings.sentences_per_batch, most or self.settings.sentences_per_batch)
        takers = [job for job in self.line if job.config == config]
        batch: list[tuple[Job, int]] = []
        width = 0
        while len(batch) < limit:
            took = False
            for job in takers:
                if not job.pending or len(batch) == limit:
                    continue
                wider = max(width, len(job.sources[job.pending[0]]))
                if batch and (len(batch) + 1) * wider * config.beam_size > self.settings.max_batch_tokens:
                    continue  # too wide to join: it waits for a batch of its own turn
                batch.append((job, job.pending.popleft()))
                width, took = wider, True
            if not took:
                break
        self.line.rotate(-1)  # the head's turn is over
        for job in [job for job in self.line if not job.pending]:
            self.line.remove(job)
        return batch

    @staticmethod
    def _search(translator: Translator, batch: list[tuple[Job, int]]) -> list[list[Translation]]:
        """On a model thread: one Translator call for the whole batch (it sorts by length and pads)."""
        # The batch is already within the token budget; the copy shares the engine (and a compiled step).
        translator = translator.with_search(batch[0][0].config, batch_size=len(batch), max_tokens=None)
        return translator.translate_ids_nbest([job.sources[index] for job, index in batch])
