"""How the server spends its threads: chosen for the machine's cores unless given, split between workers and the
batches each searches at once, and refused in one line when the split cannot give each at least one thread."""

from __future__ import annotations

import pytest

from vaswani.errors import ConfigError
from vaswani.serve.settings import ServeSettings, ThreadLayout, thread_layout


@pytest.mark.parametrize("settings, cores, expected", [
    (ServeSettings(), 2, ThreadLayout(1, 2, 1)),  # the measured default: a batch per core, one thread each
    (ServeSettings(), 16, ThreadLayout(1, 16, 1)),
    (ServeSettings(workers=2), 2, ThreadLayout(2, 1, 1)),  # the cores split between the workers
    (ServeSettings(workers=2), 8, ThreadLayout(2, 4, 1)),
    (ServeSettings(threads=1), 2, ThreadLayout(1, 1, 1)),  # fewer threads given: as many batches as threads
    (ServeSettings(threads=4, parallel_batches=2), 2, ThreadLayout(1, 2, 2)),
    (ServeSettings(threads=2, parallel_batches=1), 16, ThreadLayout(1, 1, 2)),
    (ServeSettings(workers=3, threads=7), 2, ThreadLayout(3, 2, 1)),  # 7 // 3: two threads per worker
])
def test_the_layout_of_the_threads(settings: ServeSettings, cores: int, expected: ThreadLayout) -> None:
    assert thread_layout(settings, cores) == expected


def test_the_torch_engine_searches_one_batch_at_a_time_on_the_workers_share() -> None:
    assert thread_layout(ServeSettings(), 4, batches_at_once=False) == ThreadLayout(1, 1, 4)
    assert thread_layout(ServeSettings(workers=2), 4, batches_at_once=False) == ThreadLayout(2, 1, 2)


@pytest.mark.parametrize("settings, message", [
    (ServeSettings(workers=4, threads=2), "--threads 2: fewer than --workers 4; give each worker at least one thread"),
    (ServeSettings(threads=2, parallel_batches=3), "--parallel-batches 3: more than the 2 thread(s) of each worker "
                                                   "(--threads 2 over --workers 1); give each batch at least one "
                                                   "thread"),
])
def test_a_split_that_leaves_a_worker_or_batch_without_a_thread_is_refused(settings: ServeSettings,
                                                                          message: str) -> None:
    with pytest.raises(ConfigError) as error:
        thread_layout(settings, 2)
    assert str(error.value) == message
