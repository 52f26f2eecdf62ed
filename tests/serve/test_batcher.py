"""Request batching: concurrent requests share batches, and every sentence gets what it gets alone."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest

from vaswani.decoding import SearchConfig, Translator
from vaswani.serve.batcher import Batcher, QueueFull, _Request, _Sentence
from vaswani.serve.settings import ServeSettings


@pytest.fixture(scope="module")
def translator(tiny_checkpoint) -> Translator:
    return Translator.load(tiny_checkpoint, SearchConfig(beam_size=2, max_len_a=0.5, max_len_b=5, precision="fp32"),
                           device="cpu")  # batched and alone must agree to the token: fp32, not a CPU's bf16


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


def test_batches_are_bounded_so_an_early_long_request_cannot_starve_later_ones(translator: Translator) -> None:
    batcher = Batcher(translator, ServeSettings(max_batch_sentences=3, max_batch_tokens=10_000, max_queue=100))
    config, greedy = translator.config, dataclasses.replace(translator.config, beam_size=1)

    async def fill_then_take():
        batcher.start()
        loop = asyncio.get_running_loop()
        # Queued directly (no awaiting): one request of 7 sentences, then a greedy one, then a short one.
        for sources, search in (([[5, 2]] * 7, config), ([[6, 2]], greedy), ([[7, 2]], config)):
            for i, source in enumerate(sources):
                batcher.queue.append(_Sentence(source, search, _Request(loop.create_future(), [None], 1), i))
        batches = []
        while batcher.queue:
            batches.append([(s.source[0], s.config.beam_size) for s in batcher._take_batch()])
        await batcher.stop()
        return batches

    batches = asyncio.run(fill_then_take())
    assert all(len(batch) <= 3 for batch in batches)  # bounded batch
    assert batches[:2] == [[(5, 2)] * 3] * 2  # first come, first served
    assert batches[2] == [(5, 2), (7, 2)]  # the long request's tail takes the later same-settings sentence along
    assert batches[3] == [(6, 1)]  # other settings: served next, not pushed back behind later arrivals
    assert len(batches) == 4


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
