"""Request batching: sentences of concurrent requests are gathered for a few milliseconds into one batch.

Every request is split into sentences that join one FIFO queue. A single worker task takes the oldest sentence,
waits ``batch_wait_ms`` for company, and fills a batch with the following sentences that share its search
settings, up to ``max_batch_sentences`` and ``max_batch_tokens`` (padded source tokens × beam). The batch is
searched in one model thread (one batch at a time, so torch's threads are never oversubscribed), and each
request is answered when its last sentence is done.

Why it is fair: the queue head always goes into the next batch, and a batch is bounded, so a sentence waits at
most for the sentences queued before it — a request with many long texts delays later ones by a bounded number
of batches, never indefinitely. Why it is exact: our search is batch-independent (padding is masked and finished
rows are dropped), so a sentence gets the same translation in any batch.
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
class _Request:
    future: asyncio.Future
    results: list[list[Translation] | None]
    remaining: int


@dataclass
class _Sentence:
    source: list[int]  # ids + </s>
    config: SearchConfig
    request: _Request
    index: int  # position in its request
    queued_at: float = field(default_factory=time.perf_counter)


class Batcher:
    """Owns the model thread. ``await translate(sources, config)`` from any request handler."""

    def __init__(self, translator: Translator, settings: ServeSettings):
        self.translator = translator
        self.settings = settings
        self.queue: deque[_Sentence] = deque()
        self.model_thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="vaswani-model")
        self.batches_run = 0
        self.sentences_run = 0
        self.in_flight = 0  # sentences submitted and not yet answered (queued or being searched)
        self._wakeup: asyncio.Event | None = None
        self._worker: asyncio.Task | None = None
        self._exclusive_waiting = 0  # attention requests, counted against the queue limit too

    # ---- lifecycle ---------------------------------------------------------------------------------------------
    def start(self) -> None:
        self._wakeup = asyncio.Event()
        self._worker = asyncio.get_running_loop().create_task(self._run(), name="vaswani-batcher")

    async def stop(self) -> None:
        if self._worker is not None:
            self._worker.cancel()
            try:
                await self._worker
            except asyncio.CancelledError:
                pass
        self.model_thread.shutdown(wait=True)

    @property
    def waiting(self) -> int:
        return len(self.queue) + self._exclusive_waiting

    # ---- API ---------------------------------------------------------------------------------------------------
    async def translate(self, sources: Sequence[list[int]], config: SearchConfig) -> list[list[Translation]]:
        """n-best translations of ``sources`` (ids), searched together with whatever else is waiting."""
        if self.waiting + len(sources) > self.settings.max_queue:
            raise QueueFull
        request = _Request(asyncio.get_running_loop().create_future(), [None] * len(sources), len(sources))
        for index, source in enumerate(sources):
            self.queue.append(_Sentence(source, config, request, index))
        assert self._wakeup is not None, "Batcher.start() was not called"
        self._wakeup.set()
        self.in_flight += len(sources)
        try:
            return await request.future
        finally:
            self.in_flight -= len(sources)

    async def run_exclusive(self, work: Callable[[], Any]) -> Any:
        """Run ``work`` on the model thread between batches (the attention endpoint), under the same queue limit."""
        if self.waiting + 1 > self.settings.max_queue:
            raise QueueFull
        self._exclusive_waiting += 1
        self.in_flight += 1
        try:
            return await asyncio.get_running_loop().run_in_executor(self.model_thread, work)
        finally:
            self._exclusive_waiting -= 1
            self.in_flight -= 1

    # ---- the worker --------------------------------------------------------------------------------------------
    async def _run(self) -> None:
        assert self._wakeup is not None
        loop = asyncio.get_running_loop()
        while True:
            if not self.queue:
                self._wakeup.clear()
                await self._wakeup.wait()
                continue
            # Gather: the oldest sentence waits at most batch_wait_ms (counted from its arrival) for company.
            delay = self.queue[0].queued_at + self.settings.wait_seconds - time.perf_counter()
            if delay > 0 and len(self.queue) < self.settings.sentences_per_batch:
                await asyncio.sleep(delay)
            batch = self._take_batch()
            try:
                results = await loop.run_in_executor(self.model_thread, self._search, batch)
            except Exception as error:  # noqa: BLE001 - answer the requests instead of killing the worker
                for sentence in batch:
                    if not sentence.request.future.done():
                        sentence.request.future.set_exception(error)
                continue
            self.batches_run += 1
            self.sentences_run += len(batch)
            for sentence, nbest in zip(batch, results):
                request = sentence.request
                request.results[sentence.index] = nbest
                request.remaining -= 1
                if request.remaining == 0 and not request.future.done():  # done = the client went away
                    request.future.set_result(request.results)

    def _take_batch(self) -> list[_Sentence]:
        """The queue head plus the following sentences with the same search settings, within both budgets."""
        head = self.queue.popleft()
        batch, width, skipped = [head], len(head.source), deque()
        while self.queue and len(batch) < self.settings.sentences_per_batch:
            candidate = self.queue.popleft()
            if candidate.config != head.config:
                skipped.append(candidate)  # other settings: a later batch, keeping its place in line
                continue
            wider = max(width, len(candidate.source))
            if (len(batch) + 1) * wider * head.config.beam_size > self.settings.max_batch_tokens:
                skipped.append(candidate)
                break
            batch.append(candidate)
            width = wider
        self.queue.extendleft(reversed(skipped))
        return batch

    def _search(self, batch: list[_Sentence]) -> list[list[Translation]]:
        """On the model thread: one Translator call for the whole batch (it sorts by length and pads)."""
        # The batch is already within the token budget; the copy shares the model (and its compiled step).
        translator = self.translator.with_search(batch[0].config, batch_size=len(batch), max_tokens=None)
        return translator.translate_ids_nbest([sentence.source for sentence in batch])
