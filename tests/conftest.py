"""Shared test fixtures: the device the suite runs on, and the real data directory."""

from __future__ import annotations

import os
from collections.abc import Iterator
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


@pytest.fixture(autouse=True)
def _one_thread() -> Iterator[None]:
    """Tests use tiny models and tiny matmuls: one intra-op thread is faster, and far faster when other processes
    share the cores (idle OpenMP threads spin and fight them). Restored after each test."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="session")
def tiny_checkpoint(tmp_path_factory, data_dir: Path) -> Path:
    """A random tiny model saved as a whole checkpoint (weights with their fingerprint, model.json, tokenizer.json and
    the manifest), with a byte-level BPE trained on 500 Multi30k lines."""
    from vaswani.config import ModelConfig
    from vaswani.data.corpora import load_corpus
    from vaswani.data.tokenizer import Tokenizer
    from vaswani.io import write_manifest
    from vaswani.model import Transformer
    from vaswani.model.serialization import CHECKPOINT_KIND, save_model

    directory = tmp_path_factory.mktemp("tiny_checkpoint")
    train = load_corpus("multi30k", "train", data_dir=data_dir)
    tokenizer = Tokenizer.train(train.source[:500] + train.target[:500], vocab_size=1000)
    torch.manual_seed(0)
    tokenizer.save(directory / "tokenizer.json")
    save_model(Transformer(ModelConfig.preset("tiny", dropout=0.0, vocab_size=tokenizer.vocab_size)), directory,
               directory / "tokenizer.json")
    write_manifest(directory, CHECKPOINT_KIND)
    return directory


@pytest.fixture
def checkpoint(tmp_path, tiny_checkpoint: Path) -> Path:
    """A private copy of the session's tiny checkpoint, free to damage."""
    import shutil

    return Path(shutil.copytree(tiny_checkpoint, tmp_path / "checkpoint"))


@pytest.fixture
def source_file(tmp_path) -> Path:
    """Two German sentences, one per line, to translate."""
    path = tmp_path / "in.de"
    path.write_text("Ein Mann fährt Fahrrad.\nZwei Hunde spielen.\n", encoding="utf-8")
    return path


# A finished tiny run whose end chose its final model: 3 evaluations (so averages of 2 and 3 checkpoints), a short
# validation subset and beam 2, so the whole end of the run takes seconds.
FINAL_MODEL_RUN = [
    "train.max_epochs=null", "train.max_steps=12", "train.eval_every_steps=4", "train.bleu_subset=0",
    "train.precision=fp32", "train.progress=false", "train.patience=null", "train.max_tokens=600",
    "data.vocab_size=400", "train.final_model=true", "train.average_last=3", "train.final_beam=2",
    "train.final_alphas=0.6,1.5", "train.final_valid_sentences=24", "train.final_test_splits=test2016",
]


@pytest.fixture(scope="session")
def finished_run(tmp_path_factory, data_dir: Path) -> tuple[Path, dict]:
    """(run directory, summary) of a tiny smoke run trained to its final model."""
    from vaswani.training.config import apply_settings, load_preset
    from vaswani.training.trainer import train

    root = tmp_path_factory.mktemp("final")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("VASWANI_CACHE", str(root / "cache"))
        patch.chdir(root)
        config = apply_settings(load_preset("smoke"), FINAL_MODEL_RUN)
        config.data.data_dir = str(data_dir)
        summary = train(config, root / "run")
    return root / "run", summary
