"""Fixtures of the decoding tests: one thread, a random tiny checkpoint with a real BPE, 20 test sentences."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def test_pairs(data_dir: Path) -> tuple[list[str], list[str]]:
    """20 German sentences of Multi30k test2016 and their references."""
    from vaswani.data.corpora import load_corpus

    test = load_corpus("multi30k", "test2016", data_dir=data_dir)
    return test.source[:20], test.target[:20]
