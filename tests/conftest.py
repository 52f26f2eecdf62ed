"""Shared test fixtures: the device the suite runs on, and the real data directory."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

REPO_ROOT = Path(__file__).resolve().parents[1]


def pick_device() -> torch.device:
    """VASWANI_TEST_DEVICE if set, else CUDA when present, else CPU: the same suite runs on a lent GPU."""
    name = os.environ.get("VASWANI_TEST_DEVICE") or ("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


@pytest.fixture(scope="session")
def device() -> torch.device:
    return pick_device()


def shared_data_dir() -> Path | None:
    for candidate in (os.environ.get("VASWANI_DATA"), REPO_ROOT.parent / "shared" / "data"):
        if candidate and (Path(candidate) / "multi30k").is_dir():
            return Path(candidate)
    return None


@pytest.fixture(scope="session")
def data_dir() -> Path:
    path = shared_data_dir()
    if path is None:
        pytest.skip("real corpora not found: set VASWANI_DATA to the shared data directory")
    return path


@pytest.fixture(autouse=True)
def _seed() -> None:
    torch.manual_seed(0)
