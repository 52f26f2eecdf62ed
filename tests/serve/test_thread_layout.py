"""How the server spends its threads: chosen for the machine's cores unless given, split between workers and the
batches each searches at once, and refused in one line when the split cannot give each at least one thread."""

from __future__ import annotations

import pytest

from vaswani.decoding import EngineOptions
from vaswani.errors import ConfigError
from vaswani.serve.settings import ServeSettings, ThreadLayout, thread_layout


def settings(threads: int = 0, **fields: int) -> ServeSettings:
    return ServeSettings(engine_options=EngineOptions(engine=None, threads=threads), **fields)


@pytest.mark.parametrize("given, cores, expected", [
    (settings(), 2, ThreadLayout(1, 2, 1)),  # the measured default: a batch per core, one thread each
    (settings(), 16, ThreadLayout(1, 16, 1)),
    (settings(workers=2), 2, ThreadLayout(2, 1, 1)),  # the cores split between the workers
    (settings(workers=2), 8, ThreadLayout(2, 4, 1)),
    (settings(threads=1), 2, ThreadLayout(1, 1, 1)),  # fewer threads given: as many batches as threads
    (settings(threads=4, parallel_batches=2), 2, ThreadLayout(1, 2, 2)),
    (settings(threads=2, parallel_batches=1), 16, ThreadLayout(1, 1, 2)),
    (settings(threads=7, workers=3), 2, ThreadLayout(3, 2, 1)),  # 7 // 3: two threads per worker
])
def test_the_layout_of_the_threads(given: ServeSettings, cores: int, expected: ThreadLayout) -> None:
    assert thread_layout(given, cores) == expected
    assert ServeSettings().engine_options.threads == 0  # a server not told its threads chooses them


def test_the_torch_engine_searches_one_batch_at_a_time_on_the_workers_share() -> None:
    assert thread_layout(settings(), 4, batches_at_once=False) == ThreadLayout(1, 1, 4)
    assert thread_layout(settings(workers=2), 4, batches_at_once=False) == ThreadLayout(2, 1, 2)


@pytest.mark.parametrize("given, message", [
    (settings(threads=2, workers=4), "`threads` 2: fewer than `serve.workers` 4; give each worker at least one thread"),
    (settings(threads=2, parallel_batches=3), "`serve.parallel_batches` 3: more than the 2 thread(s) of each worker "
                                              "(`threads` 2 over `serve.workers` 1); give each batch at least one "
                                              "thread"),
])
def test_a_split_that_leaves_a_worker_or_batch_without_a_thread_is_refused(given: ServeSettings, message: str) -> None:
    with pytest.raises(ConfigError) as error:
        thread_layout(given, 2)
    assert str(error.value) == message
