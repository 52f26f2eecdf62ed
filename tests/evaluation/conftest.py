"""Fixtures of the evaluation tests: a random tiny checkpoint (real BPE) and a 20-sentence test file pair."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import torch


@pytest.fixture(autouse=True)
def _one_thread() -> Iterator[None]:
    """Tiny models: one intra-op thread is faster, and far faster on cores shared with other processes."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="session")
def tiny_checkpoint(tmp_path_factory, data_dir: Path) -> Path:
    """A random tiny model saved with save_model, beside a byte-level BPE trained on 500 Multi30k lines."""
    from vaswani.config import ModelConfig
    from vaswani.data.corpora import load_corpus
    from vaswani.data.tokenizer import Tokenizer
    from vaswani.model import Transformer
    from vaswani.model.serialization import save_model

    directory = tmp_path_factory.mktemp("tiny_checkpoint")
    train = load_corpus("multi30k", "train", data_dir=data_dir)
    tokenizer = Tokenizer.train(train.source[:500] + train.target[:500], vocab_size=1000)
    torch.manual_seed(0)
    save_model(Transformer(ModelConfig.preset("tiny", dropout=0.0, vocab_size=tokenizer.vocab_size)), directory)
    tokenizer.save(directory / "tokenizer.json")
    return directory


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
