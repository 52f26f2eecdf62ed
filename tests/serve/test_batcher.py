"""Continuous request batching: an idle model searches at once, concurrent requests share batches, and every
sentence gets what it gets alone."""

from __future__ import annotations

import asyncio
import dataclasses
import threading
import time
from collections import deque

import pytest

from vaswani.decoding import EngineOptions, SearchConfig, Translator
from vaswani.serve.batcher import Batcher, Counters, Job, QueueFull
from vaswani.serve.settings import ServeSettings


@pytest.fixture(scope="module")
def translator(tiny_checkpoint) -> Translator:
    # batched and alone must agree to the token: fp32, not a CPU's bf16
    return Translator.load(tiny_checkpoint, SearchConfig(beam_size=2, max_len_a=0.5, max_len_b=5, precision="fp32"),
                           options=EngineOptions(device="cpu"))


def _run_concurrently(translator: Translator, settings: ServeSettings, requests: list[tuple[list[str], SearchConfig]]):
    """Submit every request at once, as concurrent clients would; returns (answers, batcher)."""

    async def main():
        batcher = Batcher(translator, settings)
        batcher.start()
        try:
            calls = [batcher.translate(translator.encode(texts), config) for texts, config in requests]
            return await asyncio.gather(*calls), batcher
        finally:
            await batcher.stop()

    return asyncio.run(main())


def test_batched_translations_equal_one_sentence_at_a_time(translator: Translator, test_pairs) -> None:
    greedy = dataclasses.replace(translator.config, beam_size=1)
    requests = [([text], translator.config) for text in test_pairs[0][:10]]
    requests += [(test_pairs[0][10:13], translator.config), (test_pairs[0][13:15], greedy)]  # mixed settings
    answers, batcher = _run_concurrently(translator, ServeSettings(batch_wait_ms=50), requests)
    assert batcher.batches_run < batcher.sentences_run == 15  # requests really were searched together
    for (texts, config), nbest_lists in zip(requests, answers):
        alone = [Translator(translator.model, translator.tokenizer, config).translate_nbest([t])[0] for t in texts]
        assert [[h.text for h in n] for n in nbest_lists] == [[h.text for h in n] for n in alone]
        for got, expected in zip(nbest_lists, alone):
            assert [h.score for h in got] == pytest.approx([h.score for h in expected], abs=1e-4)


def test_without_batching_every_sentence_is_its_own_batch(translator: Translator, test_pairs) -> None:
    requests = [([text], translator.config) for text in test_pairs[0][:4]]
    answers, batcher = _run_concurrently(translator, ServeSettings(batching=False), requests)
    assert batcher.batches_run == batcher.sentences_run == 4
    assert [a[0][0].text for a in answers] == translator.translate(test_pairs[0][:4])


def _queue(batcher: Batcher, requests: list[tuple[list[list[int]], SearchConfig]]) -> list[Job]:
    """Put jobs in line directly (no awaiting), in this order, as if they had arrived so."""
    loop = asyncio.get_running_loop()
    jobs = [Job(sources, config, loop.create_future(), [None] * len(sources), deque(range(len(sources))),
                len(sources)) for sources, config in requests]
    batcher.line.extend(jobs)
    return jobs


def _batches(batcher: Batcher) -> list[list[tuple[int, int]]]:
    """Every batch the line gives, as (first source id, beam) per sentence."""
    batches = []
    while batcher.line:
        batches.append([(job.sources[i][0], job.config.beam_size) for job, i in batcher.take_batch()])
    return batches


def test_a_large_request_is_split_and_takes_turns_with_later_ones(translator: Translator) -> None:
    batcher = Batcher(translator, ServeSettings(max_batch_sentences=3, max_batch_tokens=10_000, max_queue=100))
    config, greedy = translator.config, dataclasses.replace(translator.config, beam_size=1)

    async def fill_then_take():
        # One request of 7 sentences, then a greedy one-sentence request, then a one-sentence request like the first.
        _queue(batcher, [([[5, 2]] * 7, config), ([[6, 2]], greedy), ([[7, 2]], config)])
        return _batches(batcher)

    batches = asyncio.run(fill_then_take())
    assert all(len(batch) <= 3 for batch in batches)  # bounded batch
    # The first batch, headed by the large request, takes the later request with its settings along at once
    # (round robin: one sentence of each in turn), so a short request never waits for all of a large one.
    assert batches[0] == [(5, 2), (7, 2), (5, 2)]
    assert batches[1] == [(6, 1)]  # other settings: the next turn is theirs, not pushed behind the large request
    assert batches[2:] == [[(5, 2)] * 3, [(5, 2)] * 2]


def test_a_wide_sentence_waits_for_a_batch_of_its_own_turn(translator: Translator) -> None:
    batcher = Batcher(translator, ServeSettings(max_batch_sentences=8, max_batch_tokens=40, max_queue=100))
    config = dataclasses.replace(translator.config, beam_size=2)

    async def fill_then_take():
        _queue(batcher, [([[5, 2]] * 3, config), ([[6] * 15 + [2]], config), ([[7, 2]], config)])
        return _batches(batcher)

    # 2 tokens x beam 2 per short sentence; the 16-token one alone is 32, with any other sentence over 40
    assert asyncio.run(fill_then_take()) == [[(5, 2), (7, 2), (5, 2), (5, 2)], [(6, 2)]]


def test_a_cancelled_request_leaves_the_line_and_its_sentences_are_never_searched(translator: Translator) -> None:
    async def main():
        batcher = Batcher(translator, ServeSettings(max_batch_sentences=1, batch_wait_ms=0))
        batcher.start()
        try:
            gone = asyncio.ensure_future(batcher.translate([[5, 6, 2]] * 6, translator.config))
            stays = asyncio.ensure_future(batcher.translate([[7, 2]], translator.config))
            while batcher.sentences_run == 0:  # the first sentence of the large request is being searched
                await asyncio.sleep(0.001)
            gone.cancel()
            answer = await stays
            return batcher, answer, gone
        finally:
            await batcher.stop()

    batcher, answer, gone = asyncio.run(main())
    assert gone.cancelled() and len(answer) == 1
    assert batcher.sentences_cancelled >= 4 and batcher.sentences_run + batcher.sentences_cancelled == 7
    assert batcher.in_flight == 0 and not batcher.line


def test_queue_limit_counts_sentences(translator: Translator) -> None:
    async def main():
        batcher = Batcher(translator, ServeSettings(max_queue=3))
        batcher.start()
        try:
            with pytest.raises(QueueFull):
                await batcher.translate([[5, 2]] * 4, translator.config)
            return await batcher.translate([[5, 2]] * 3, translator.config)
        finally:
            await batcher.stop()

    assert len(asyncio.run(main())) == 3


class GatedEngine:
    """The translator's engine, holding every search until the test opens the gate, and recording each batch's
    size as it starts: the test decides when the model is busy."""

    def __init__(self, engine) -> None:  # noqa: ANN001 - any engine
        self.engine, self.name, self.model_config, self.device = engine, engine.name, engine.model_config, engine.device
        self.gate, self.started, self.searching = threading.Event(), [], 0
        self.most_at_once = 0
        self.lock = threading.Lock()

    def bind(self, config: SearchConfig) -> SearchConfig:
        return self.engine.bind(config)

    def search(self, sources, config: SearchConfig):  # noqa: ANN001, ANN201 - the engine interface
        with self.lock:
            self.started.append(len(sources))
            self.searching += 1
            self.most_at_once = max(self.most_at_once, self.searching)
        assert self.gate.wait(timeout=30), "the test never opened the gate"
        try:
            return self.engine.search(sources, config)
        finally:
            with self.lock:
                self.searching -= 1

    def describe(self) -> dict:
        return self.engine.describe()


def _gated(translator: Translator, engine: GatedEngine | None = None) -> Translator:
    return Translator(engine or GatedEngine(translator.engine), translator.tokenizer, translator.config)


async def _until(condition, seconds: float = 10.0) -> None:  # noqa: ANN001 - a predicate
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.001)


def test_an_idle_model_searches_at_once_and_arrivals_during_a_search_form_the_next_batch(translator: Translator,
                                                                                        test_pairs) -> None:
    gated = _gated(translator)
    engine: GatedEngine = gated.engine

    async def main():
        batcher = Batcher(gated, ServeSettings())  # batch_wait_ms 0: no gathering wait
        batcher.start()
        try:
            first = asyncio.ensure_future(batcher.translate(gated.encode(test_pairs[0][:1]), gated.config))
            await _until(lambda: engine.started == [1])  # searched alone, at once: nothing else was waiting
            later = [asyncio.ensure_future(batcher.translate(gated.encode([text]), gated.config))
                     for text in test_pairs[0][1:4]]
            await _until(lambda: batcher.waiting == 3)
            assert engine.started == [1]  # the model is busy: the three wait for it, together
            engine.gate.set()
            answers = await asyncio.gather(first, *later)
            return answers, batcher.counters()
        finally:
            engine.gate.set()
            await batcher.stop()

    answers, counters = asyncio.run(main())
    assert engine.started == [1, 3]  # the arrivals of the first search formed the second batch
    assert (counters.batches_searched, counters.sentences_searched, counters.in_flight) == (2, 4, 0)
    assert [a[0][0].text for a in answers] == translator.translate(test_pairs[0][:4])


def test_the_batch_wait_is_a_ceiling_a_full_batch_does_not_wait_for(translator: Translator, test_pairs) -> None:
    settings = ServeSettings(batch_wait_ms=1000, max_batch_sentences=2)

    async def main(texts: list[str]) -> tuple[float, Counters]:
        batcher = Batcher(translator, settings)
        batcher.start()
        try:
            started = time.perf_counter()
            await asyncio.gather(*(batcher.translate(translator.encode([text]), translator.config) for text in texts))
            return time.perf_counter() - started, batcher.counters()
        finally:
            await batcher.stop()

    full, counters = asyncio.run(main(test_pairs[0][:2]))
    assert counters.batches_searched == 1 and full < 0.9, full  # full at once: searched without the wait
    alone, _ = asyncio.run(main(test_pairs[0][:1]))
    assert alone >= 1.0, alone  # a lone sentence is held for company up to the ceiling


def test_parallel_slots_search_a_second_batch_while_the_first_is_busy(translator: Translator, test_pairs) -> None:
    engine = GatedEngine(translator.engine)  # both slots share one gate, so both searches stay open together
    slots = [_gated(translator, engine), _gated(translator, engine)]

    async def main():
        batcher = Batcher(slots, ServeSettings())
        batcher.start()
        try:
            first = asyncio.ensure_future(batcher.translate(translator.encode(test_pairs[0][:1]), translator.config))
            await _until(lambda: engine.searching == 1)
            second = asyncio.ensure_future(batcher.translate(translator.encode(test_pairs[0][1:2]),
                                                             translator.config))
            await _until(lambda: engine.searching == 2)  # the free slot took it at once
            engine.gate.set()
            return await asyncio.gather(first, second)
        finally:
            engine.gate.set()
            await batcher.stop()

    answers = asyncio.run(main())
    assert engine.most_at_once == 2 and engine.started == [1, 1]
    assert [a[0][0].text for a in answers] == translator.translate(test_pairs[0][:2])


def test_what_waits_is_shared_between_the_free_slots(translator: Translator, test_pairs) -> None:
    engine = GatedEngine(translator.engine)
    slots = [_gated(translator, engine) for _ in range(3)]

    async def main():
        batcher = Batcher(slots, ServeSettings(batch_wait_ms=50))  # the eight arrive within the gathering ceiling
        batcher.start()
        try:
            calls = [batcher.translate(translator.encode([text]), translator.config) for text in test_pairs[0][:8]]
            answers = asyncio.gather(*calls)
            await _until(lambda: engine.searching == 3)
            engine.gate.set()
            return await answers
        finally:
            engine.gate.set()
            await batcher.stop()

    answers = asyncio.run(main())
    assert sorted(engine.started) == [2, 3, 3]  # eight sentences over three free slots, not eight in one
    assert [a[0][0].text for a in answers] == translator.translate(test_pairs[0][:8])
