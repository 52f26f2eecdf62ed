"""Fixtures of the evaluation tests: a random tiny checkpoint (real BPE) and a 20-sentence test file pair."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def test_files(tmp_path_factory, data_dir: Path) -> tuple[Path, Path]:
    """The first 20 lines of Multi30k test2016 as a source/reference file pair."""
    from vaswani.data.corpora import load_corpus

    test = load_corpus("multi30k", "test2016", data_dir=data_dir)
    directory = tmp_path_factory.mktemp("test_files")
    src, ref = directory / "test20.de", directory / "test20.en"
    src.write_text("\n".join(test.source[:20]) + "\n", encoding="utf-8")
    ref.write_text("\n".join(test.target[:20]) + "\n", encoding="utf-8")
    return src, ref
