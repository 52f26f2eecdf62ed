"""Fixtures of the fault suite: the command line run in this process, a file-size limit standing in for a full disk,
snapshots of a directory's state, and small real inputs (a checkpoint, a trained run, a prepared corpus, a
classifier) to damage. Helpers reach the tests as fixtures, as in tests/classification."""

from __future__ import annotations

import contextlib
import os
import resource
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import torch

from vaswani.cli import main

# What the tiny runs of this suite train: two updates of the tiny model with a 400-token BPE, on Multi30k's 1,014
# validation pairs (validated on test2016), so that preparing the data takes a moment.
TINY_RUN = ["train.max_epochs=null", "train.max_steps=2", "train.eval_every_steps=null", "train.bleu_subset=0",
            "train.precision=fp32", "train.progress=false", "train.patience=null", "train.log_every_steps=1",
            "train.max_tokens=600", "data.vocab_size=400", "train.keep_checkpoints=5", "data.train_split=val",
            "data.valid_split=test2016"]


@pytest.fixture
def run(capsys, monkeypatch) -> Callable[..., tuple[int, str, str]]:
    """Run ``vaswani ARGS`` in this process; return (exit status, stdout, stderr). An exception escaping main() is a
    traceback the user would have seen, so the test fails with it."""

    def call(*args: str | Path) -> tuple[int, str, str]:
        capsys.readouterr()
        try:
            code = main([str(a) for a in args])
        except SystemExit as exit:  # argparse's own usage errors
            code = exit.code
        out, err = capsys.readouterr()
        return code, out, err

    return call


@pytest.fixture
def assert_one_line() -> Callable[..., str]:
    def check(code: int, err: str, expected_code: int, *fragments: str) -> str:
        """The command ended with ``expected_code`` and exactly one error line holding every fragment; returns it."""
        assert code == expected_code, err
        assert "Traceback" not in err, err
        lines = [line for line in err.splitlines() if "error:" in line]
        assert len(lines) == 1, err
        for fragment in fragments:
            assert fragment in lines[0], err
        return lines[0]

    return check


@contextlib.contextmanager
def file_size_limit(limit: int) -> Iterator[None]:
    """Files of this process cannot grow past ``limit`` bytes while the block runs (``ulimit -f``): a write past it
    fails with EFBIG, as one past the end of a full disk fails with ENOSPC. Python ignores SIGXFSZ, so the process
    sees the error instead of being killed. Files already larger are only read."""
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))


@pytest.fixture
def disk_full() -> Callable[[int], contextlib.AbstractContextManager]:
    return file_size_limit


def snapshot(root: Path) -> dict[str, str | bytes]:
    """Every entry under ``root``, hidden ones included: a file's bytes, a link's target, or "dir"."""
    found: dict[str, str | bytes] = {}
    for path in sorted(root.rglob("*")):
        name = str(path.relative_to(root))
        if path.is_symlink():
            found[name] = f"link:{os.readlink(path)}"
        elif path.is_dir():
            found[name] = "dir"
        else:
            found[name] = path.read_bytes()
    return found


@pytest.fixture
def state() -> Callable[[Path], dict[str, str | bytes]]:
    return snapshot


@pytest.fixture
def leftovers() -> Callable[[Path], list[str]]:
    def find(root: Path) -> list[str]:
        """Hidden staging or temporary entries a failed write could leave under ``root`` (a run's .lock is meant to
        stay: the kernel drops the lock itself)."""
        return sorted(str(p.relative_to(root)) for p in root.rglob(".*") if p.name != ".lock")

    return find


# ---- inputs -----------------------------------------------------------------------------------------------------

@pytest.fixture
def references(tmp_path) -> Path:
    """The English of the root conftest's source_file."""
    path = tmp_path / "ref.en"
    path.write_text("A man rides a bike.\nTwo dogs play.\n", encoding="utf-8")
    return path


@pytest.fixture(scope="session")
def workdir(tmp_path_factory, data_dir: Path) -> Path:
    """A working directory whose prepared data (tokenizer, cache) every run of the suite shares."""
    from vaswani.data.pipeline import default_out_dir, prepare_dataset

    root = tmp_path_factory.mktemp("faults")
    prepare_dataset("multi30k", splits=("train", "test2016"), train_split="val", data_dir=data_dir,
                    out_dir=root / default_out_dir("multi30k", "de-en", 400), vocab_size=400)
    return root


@pytest.fixture(scope="session")
def trained_run(workdir: Path, data_dir: Path) -> Path:
    """A tiny run of two updates, with its checkpoint, metrics and manifest (trained once)."""
    from vaswani.training.presets import apply_settings, load_preset
    from vaswani.training.run import train

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(workdir)
        config = apply_settings(load_preset("smoke"), TINY_RUN)
        config.data.data_dir = str(data_dir)
        train(config, workdir / "trained")
    torch.set_num_threads(threads)
    return workdir / "trained"


@pytest.fixture
def train_args(data_dir: Path) -> Callable[..., list[str]]:
    def args(run_dir: Path, *extra: str) -> list[str]:
        """``vaswani train`` arguments of this suite's tiny run in ``run_dir``."""
        settings = [part for setting in TINY_RUN for part in ("--set", setting)]
        return ["train", "--preset", "smoke", "--run-dir", str(run_dir), "--data-dir", str(data_dir), *settings,
                *extra]

    return args


@pytest.fixture(scope="module")
def local_corpus(tmp_path_factory, data_dir: Path) -> tuple[Path, Path]:
    """2,000 aligned Multi30k lines as two plain files: a corpus `prepare` encodes in a moment."""
    from vaswani.data.corpora import load_corpus

    root = tmp_path_factory.mktemp("corpus")
    corpus = load_corpus("multi30k", "train", data_dir=data_dir)
    (root / "train.de").write_text("\n".join(corpus.source[:2000]) + "\n", encoding="utf-8")
    (root / "train.en").write_text("\n".join(corpus.target[:2000]) + "\n", encoding="utf-8")
    return root / "train.de", root / "train.en"


@pytest.fixture
def classifier(tmp_path) -> Path:
    """A classifier directory as `classify train` writes it (random weights: loading is what is tested)."""
    from vaswani.classification.checkpoint import CLASSIFIER_KIND, ClassifierInfo, save_classifier
    from vaswani.classification.model import TransformerClassifier
    from vaswani.classification.word_tokenizer import WordTokenizer
    from vaswani.config import ModelConfig
    from vaswani.io import write_manifest

    tokenizer = WordTokenizer.train(["fire in the forest", "a sunny day at the beach"] * 3, vocab_size=40,
                                    min_frequency=1)
    config = ModelConfig.preset("tiny", vocab_size=tokenizer.vocab_size, max_len=32, dropout=0.0)
    info = ClassifierInfo(config, ["0", "1"], "mean", "word", 32)
    directory = tmp_path / "classifier"
    save_classifier(directory, TransformerClassifier(config, 2, "mean"), tokenizer, info)
    write_manifest(directory, CLASSIFIER_KIND)
    return directory
