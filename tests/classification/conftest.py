"""Fixtures of the classification tests: one thread, CSV writers, a synthetic task a classifier must learn exactly."""

from __future__ import annotations

import csv
import os
import random
from pathlib import Path

import pytest

# Three classes, each announced by one keyword hidden among filler words: a model that reads its input learns this
# perfectly; one that ignores positions or padding, or shuffles rows, does not.
KEYWORDS = {"finance": "stocks", "sports": "goal", "weather": "storm"}
FILLER = ("the a today we saw very big small news people city again after before near with from more some new "
          "old good bad red blue".split())


def write_csv(path: Path, header: list[str], rows: list[list[str]], newline: str = "\r\n") -> Path:
    with open(path, "w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle, lineterminator=newline)
        writer.writerow(header)
        writer.writerows(rows)
    return path


def synthetic_rows(n: int, seed: int) -> list[list[str]]:
    """[id, text, label]: 3-10 filler words with the class keyword at a random place, classes balanced."""
    rng = random.Random(seed)
    labels = sorted(KEYWORDS)
    rows = []
    for i in range(n):
        label = labels[i % len(labels)]
        words = [rng.choice(FILLER) for _ in range(rng.randint(3, 10))]
        words.insert(rng.randint(0, len(words)), KEYWORDS[label])
        rows.append([str(i), " ".join(words).capitalize(), label])
    return rows


@pytest.fixture(scope="session")
def synthetic_csv(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("synthetic") / "synthetic.csv"
    return write_csv(path, ["id", "sentence", "label"], synthetic_rows(240, seed=0))


# Helpers reach the tests as fixtures: `from conftest import …` would be ambiguous with several conftest.py files.
@pytest.fixture
def csv_file():
    return write_csv


@pytest.fixture
def synthetic():
    """synthetic(n, seed) -> rows [id, text, label] of the keyword task."""
    return synthetic_rows


@pytest.fixture
def tweets_csv() -> Path:
    """The Kaggle disaster tweets, via VASWANI_DATA or the repository's ../shared/data."""
    root = Path(__file__).resolve().parents[2]
    for candidate in (os.environ.get("VASWANI_DATA"), root.parent / "shared" / "data"):
        if candidate and (Path(candidate) / "disaster_tweets" / "train.csv").is_file():
            return Path(candidate) / "disaster_tweets" / "train.csv"
    pytest.skip("disaster_tweets/train.csv not found: set VASWANI_DATA to the shared data directory")
