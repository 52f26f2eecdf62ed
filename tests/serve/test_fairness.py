"""A real `vaswani serve` under a bounded loopback load: one maximal request does not starve fifty one-sentence
requests sent after it, and the work of a client that went away is dropped."""

from __future__ import annotations

import asyncio
import shutil
import time
from pathlib import Path

import httpx
import pytest

pytest.importorskip("ctranslate2", reason="the load test serves on CTranslate2: pip install 'vaswani[export]'")

from vaswani.decoding import EngineOptions, SearchConfig, Translator  # noqa: E402
from vaswani.decoding.config import StoredSearch  # noqa: E402
from vaswani.serve.settings import ServeSettings  # noqa: E402

SETTINGS = ServeSettings()  # the limits a user gets
SHORT_REQUESTS = 50
P95_SECONDS = 2.0


@pytest.fixture(scope="module")
def checkpoint(trained_checkpoint: Path, tmp_path_factory) -> Path:
    directory = Path(shutil.copytree(trained_checkpoint, tmp_path_factory.mktemp("fair") / "checkpoint",
                                     ignore=shutil.ignore_patterns("ctranslate2")))
    StoredSearch.of(SearchConfig(beam_size=3, length_norm="power")).write(directory)
    return directory


@pytest.fixture(scope="module")
def maximal(checkpoint: Path, data_dir: Path) -> list[str]:
    """The largest request the default limits accept: max_texts texts at max_beam, each as long as the decode work
    bound (max_request_tokens, source tokens x beam) leaves it."""
    from vaswani.data.corpora import load_corpus

    words = " ".join(load_corpus("multi30k", "test2016", data_dir=data_dir).source).split()
    translator = Translator.load(checkpoint, options=EngineOptions(device="cpu"))
    per_text = SETTINGS.max_request_tokens // (SETTINGS.max_texts * SETTINGS.max_beam)  # tokens with </s>
    texts, start = [], 0
    for _ in range(SETTINGS.max_texts):
        text = words[start]
        while len(translator.encode([f"{text} {words[start + 1]}"])[0]) <= per_text:
            start += 1
            text = f"{text} {words[start]}"
        texts.append(text)
        start += 1
    assert sum(map(len, translator.encode(texts))) * SETTINGS.max_beam <= SETTINGS.max_request_tokens
    return texts


@pytest.fixture(scope="module")
def server(checkpoint: Path, start_server):
    process = start_server(checkpoint, "--engine", "ctranslate2")
    yield process
    process.stop()


def _health(server) -> dict:
    return httpx.get(f"{server.url}/health", timeout=10).json()


@pytest.mark.slow
def test_one_maximal_request_does_not_starve_fifty_short_ones(server, maximal: list[str], test_pairs) -> None:
    async def load() -> tuple[int, list[float], list[int]]:
        limits = httpx.Limits(max_connections=SHORT_REQUESTS + 1)
        async with httpx.AsyncClient(base_url=server.url, timeout=120, limits=limits) as client:
            large = asyncio.ensure_future(client.post("/v1/translate",
                                                      json={"texts": maximal, "beam": SETTINGS.max_beam}))
            while (await client.get("/health")).json()["in_flight"] == 0:  # it has reached the server
                await asyncio.sleep(0.005)

            async def one(text: str) -> tuple[float, int]:
                sent = time.perf_counter()
                answer = await client.post("/v1/translate", json={"text": text})
                return time.perf_counter() - sent, answer.status_code

            answers = await asyncio.gather(*(one(test_pairs[0][i % 20]) for i in range(SHORT_REQUESTS)))
            return (await large).status_code, [seconds for seconds, _ in answers], [status for _, status in answers]

    large, latencies, statuses = asyncio.run(load())
    assert large == 200 and statuses == [200] * SHORT_REQUESTS
    p95 = sorted(latencies)[int(0.95 * len(latencies)) - 1]
    assert p95 <= P95_SECONDS, f"p95 {p95:.2f} s over {P95_SECONDS} s: {sorted(latencies)}"


@pytest.mark.slow
def test_the_work_of_a_client_that_went_away_is_dropped(start_server, tiny_checkpoint: Path, tmp_path: Path) -> None:
    """A random model never says </s>: each of 32 texts runs to its length limit, one batch each, slowly."""
    checkpoint = Path(shutil.copytree(tiny_checkpoint, tmp_path / "random",
                                      ignore=shutil.ignore_patterns("ctranslate2")))
    StoredSearch.of(SearchConfig(beam_size=4, length_norm="power")).write(checkpoint)
    server = start_server(checkpoint, "--engine", "ctranslate2", "--max-batch-sentences", "1", "--max-request-tokens",
                          "65536")
    try:
        line = "Ein Mann mit einem roten Hut spielt Gitarre auf der Straße, und zwei Hunde sehen ihm dabei zu. "
        texts = [f"{n}: {line * 3}" for n in range(SETTINGS.max_texts)]  # outputs of ~150 tokens, 32 batches
        with pytest.raises(httpx.ReadTimeout):  # the client waits 0.3 s, then closes its connection
            httpx.post(f"{server.url}/v1/translate", json={"texts": texts}, timeout=0.3)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            health = _health(server)
            if health["sentences_searched"] + health["sentences_cancelled"] == len(texts):
                break
            time.sleep(0.05)
        assert health["in_flight"] == 0 and health["sentences_cancelled"] > 0, health
        assert health["sentences_searched"] + health["sentences_cancelled"] == len(texts), health
        # and the server answers the next client as before
        assert httpx.post(f"{server.url}/v1/translate", json={"text": "Ein Hund."}, timeout=30).status_code == 200
    finally:
        server.stop()


def test_answers_on_a_kept_alive_connection_do_not_wait_for_delayed_acks(server) -> None:
    """With Nagle's algorithm on, an answer written in two pieces waits for the client's delayed ACK: ~40 ms a
    request, whatever the work. The server's sockets have it off."""
    with httpx.Client(base_url=server.url, timeout=30) as client:
        client.get("/health")
        took = []
        for _ in range(20):
            started = time.perf_counter()
            client.get("/health")
            took.append(time.perf_counter() - started)
    assert sorted(took)[len(took) // 2] < 0.02, took


def test_the_load_generator_counts_answers_and_errors_on_kept_alive_connections(server, test_pairs) -> None:
    from vaswani.tools.serve_load import drive

    translated = asyncio.run(drive(server.url, 4, 1.0, test_pairs[0], beam=2))
    assert translated.requests > 4 and translated.errors == 0 and translated.p95_ms > 0
    refused = asyncio.run(drive(server.url, 2, 0.3, test_pairs[0], beam=SETTINGS.max_beam + 1))
    assert refused.requests == 0 and refused.errors > 0 and refused.error_examples[0].startswith("422 ")
    ceiling = asyncio.run(drive(server.url, 4, 0.5, test_pairs[0], beam=2, health=True))
    assert ceiling.errors == 0 and ceiling.server == "health" and ceiling.per_s > translated.per_s, ceiling
