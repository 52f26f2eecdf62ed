"""Request batching: concurrent requests share batches, and every sentence gets what it gets alone."""

from __future__ import annotations

import asyncio
import dataclasses
from collections import deque

import pytest

from vaswani.decoding import EngineOptions, SearchConfig, Translator
from vaswani.serve.batcher import Batcher, Job, QueueFull
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
