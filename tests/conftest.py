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
            return Path(candidate).resolve()  # absolute: tests hand it to processes that start elsewhere
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
    from vaswani.training.run import train

    root = tmp_path_factory.mktemp("final")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("VASWANI_CACHE", str(root / "cache"))
        patch.chdir(root)
        config = apply_settings(load_preset("smoke"), FINAL_MODEL_RUN)
        config.data.data_dir = str(data_dir)
        summary = train(config, root / "run")
    return root / "run", summary


# ---- a trained tiny model: both engines and the exports are checked against it -------------------------------------
# A tiny model *trained* for a few seconds on real Multi30k pairs, so that its outputs are peaked and end in </s> (a
# random model's would run to the length limit and sit near ties), and the real sentences the tests translate: the
# training sources it has nearly learned plus test2016 sentences.
TRAIN_PAIRS = 80  # short ones (< 70 characters each side): two batches of 40
UPDATES = 60  # loss ~0.8: the training sentences are nearly learned
BATCH = 40


@pytest.fixture(scope="session")
def trained_checkpoint(tmp_path_factory, data_dir: Path) -> Path:
    """A tiny post-LN model (the paper layout) after 60 AdamW updates on 80 short Multi30k pairs, with its BPE."""
    from vaswani.config import ModelConfig
    from vaswani.data.batching import collate
    from vaswani.data.corpora import load_corpus
    from vaswani.data.tokenizer import Tokenizer
    from vaswani.model import Transformer
    from vaswani.model.serialization import save_model
    from vaswani.training.loss import translation_loss

    directory = tmp_path_factory.mktemp("trained_checkpoint")
    train = load_corpus("multi30k", "train", data_dir=data_dir)
    sources, targets = _short_pairs(train)
    tokenizer = Tokenizer.train(sources + targets, vocab_size=500)
    items = [(i, s, t) for i, (s, t) in enumerate(zip(tokenizer.encode_batch(sources), tokenizer.encode_batch(targets)))]
    items.sort(key=lambda item: len(item[1]))  # similar lengths per batch: little padding, fast steps
    batches = [collate(items[start : start + BATCH]) for start in range(0, len(items), BATCH)]
    torch.manual_seed(0)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    model = Transformer(ModelConfig.preset("tiny", vocab_size=tokenizer.vocab_size, dropout=0.0))
    optimizer = torch.optim.AdamW(model.parameters(), lr=5e-3)
    for step in range(UPDATES):
        batch = batches[step % len(batches)]
        out = translation_loss(model, batch.src, batch.tgt_in, batch.tgt_out, label_smoothing=0.0)
        (out.loss_sum / out.n_tokens).backward()
        optimizer.step()
        optimizer.zero_grad()
    torch.set_num_threads(threads)
    save_model(model.eval(), directory)
    tokenizer.save(directory / "tokenizer.json")
    return directory


@pytest.fixture(scope="session")
def sentences(data_dir: Path) -> list[str]:
    """16 training sources (the model's outputs are confident there) and 8 unseen test2016 sources."""
    from vaswani.data.corpora import load_corpus

    train, _ = _short_pairs(load_corpus("multi30k", "train", data_dir=data_dir))
    test = load_corpus("multi30k", "test2016", data_dir=data_dir).source[:8]
    return train[::5] + list(test)


def _short_pairs(corpus) -> tuple[list[str], list[str]]:
    pairs = [(s, t) for s, t in zip(corpus.source[:2000], corpus.target[:2000]) if len(s) < 70 and len(t) < 70]
    pairs = pairs[:TRAIN_PAIRS]
    return [s for s, _ in pairs], [t for _, t in pairs]


@pytest.fixture(scope="session")
def random_checkpoint(trained_checkpoint: Path):
    """make(directory, **model settings): a random tiny model with those settings, saved beside the trained
    checkpoint's tokenizer (equivalence of random weights needs no training)."""
    from vaswani.config import ModelConfig
    from vaswani.data.tokenizer import Tokenizer
    from vaswani.model import Transformer
    from vaswani.model.serialization import save_model

    tokenizer = Tokenizer.load(trained_checkpoint / "tokenizer.json")

    def make(directory: Path, **settings) -> Path:
        torch.manual_seed(0)
        model = Transformer(ModelConfig.preset("tiny", vocab_size=tokenizer.vocab_size, dropout=0.0, **settings))
        directory.mkdir(parents=True, exist_ok=True)
        save_model(model, directory)
        tokenizer.save(directory / "tokenizer.json")
        return directory

    return make
