"""Fixtures of the evaluation tests: a 20-sentence source/reference file pair."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def test_files(tmp_path_factory, test_pairs: tuple[list[str], list[str]]) -> tuple[Path, Path]:
    """The 20 synthetic test pairs as a source/reference file pair."""
    directory = tmp_path_factory.mktemp("test_files")
    src, ref = directory / "test20.de", directory / "test20.en"
    src.write_text("\n".join(test_pairs[0]) + "\n", encoding="utf-8")
    ref.write_text("\n".join(test_pairs[1]) + "\n", encoding="utf-8")
    return src, ref
