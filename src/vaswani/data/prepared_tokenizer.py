"""The tokenizer a prepared-data folder holds: trained once on the corpus (or a seeded sample of it) and saved with
its description and manifest, then loaded back checked against both, so a folder never pairs a tokenizer with
another's caches."""

from __future__ import annotations

import itertools
import logging
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Sequence

from vaswani.data.files import progress_bar
from vaswani.data.tokenizer import Tokenizer
from vaswani.errors import ConfigError, DataError
from vaswani.io import atomic_write_json, read_json, read_manifest, verify_files, write_manifest

logger = logging.getLogger(__name__)

TOKENIZER_FILE = "tokenizer.json"
TOKENIZER_INFO_FILE = "tokenizer_info.json"  # how the tokenizer was trained, to catch a mismatched --vocab-size
PREPARED_KIND = "prepared data"  # the manifest's kind: tokenizer.json and tokenizer_info.json with their sha256

# Characters of a line the tokenizer learns from, per position of max_len: a sentence that fits max_len tokens is
# far shorter.
TRAINING_CHARS_PER_POSITION = 64


@dataclass(frozen=True)
class TokenizerSample:
    """The training pairs the tokenizer learnt from: ``pairs`` of ``of``, drawn from ``seed`` (None: every pair),
    and the sha256 of the drawn indices, so that another draw is told apart."""

    pairs: int
    of: int
    seed: int | None = None
    indices_sha256: str | None = None

    def to_json(self) -> dict[str, object]:
        drawn = {"indices_sha256": self.indices_sha256} if self.indices_sha256 else {}
        return {"pairs": self.pairs, "of": self.of, "seed": self.seed, **drawn}


@dataclass(frozen=True)
class TrainedOn:
    """The corpus split a tokenizer was trained on, as tokenizer_info.json records it."""

    name: str
    split: str
    checksum: str
    sample: TokenizerSample
    files: tuple[str, ...] | None = None  # the user's files; None for a built-in corpus

    def to_json(self) -> dict[str, object]:
        files = {"files": list(self.files)} if self.files is not None else {}
        return {"name": self.name, "split": self.split, "checksum": self.checksum, **files,
                "sample": self.sample.to_json()}


def prepared_tokenizer(out: Path, tokenizer_path: str | Path | None, vocab_size: int,
                       trained_on: str | None = None) -> Tokenizer | None:
    """``tokenizer_path``'s tokenizer, or the one prepared in ``out`` (checked against its manifest and
    description; with ``trained_on``, it must have been trained on the split of that checksum), or None."""
    if tokenizer_path is not None:
        return Tokenizer.load(tokenizer_path)
    path = out / TOKENIZER_FILE
    info_path = out / TOKENIZER_INFO_FILE
    manifest = read_manifest(out)
    if manifest is not None:
        verify_files(out, manifest)  # the tokenizer and its description, as prepare wrote them
    if not path.is_file():
        return None
    tokenizer = Tokenizer.load(path)
    if info_path.is_file():
        info = read_json(info_path, "tokenizer description")
        if not isinstance(info, dict) or not isinstance(info.get("fingerprint"), str) \
                or isinstance(info.get("vocab_size"), bool) or not isinstance(info.get("vocab_size"), int):
            raise DataError(f"{info_path}: not the tokenizer description prepare writes (no \"vocab_size\" and "
                            f"\"fingerprint\"); it is damaged: delete {out} to prepare the data again")
        if info["fingerprint"] != tokenizer.fingerprint:
            raise DataError(f"{path} does not match {info_path}: it is tokenizer {tokenizer.fingerprint[:12]}, "
                            f"the one prepared here was {info['fingerprint'][:12]}; put the prepared tokenizer "
                            f"back or delete {out} to prepare the data again")
        if info["vocab_size"] != vocab_size:
            raise ConfigError(f"{path} was trained with vocab_size={info['vocab_size']}, not {vocab_size}; "
                              "choose another output directory or delete it")
        was = info.get("trained_on")
        if trained_on is not None and isinstance(was, dict) and was.get("checksum") not in (None, trained_on):
            raise ConfigError(f"{path} was trained on another corpus than these files ({was.get('files') or '?'}); "
                              "choose another output directory or delete it")
    return tokenizer


def train_prepared_tokenizer(out: Path, texts: Iterable[str], count: int, trained_on: TrainedOn, vocab_size: int,
                             min_frequency: int, max_len: int, progress: bool,
                             tags: Sequence[str] = ()) -> Tokenizer:
    """Train the BPE on ``count`` sentences and save it into ``out`` with its description and manifest; ``tags``
    are special tokens of it."""
    logger.info("training a %d-token BPE on %s %s (%d sentences)", vocab_size, trained_on.name,
                trained_on.split, count)
    # The BPE learns from the first TRAINING_CHARS_PER_POSITION * max_len characters of each line, cut before it is
    # tokenized as every encoding cuts: one enormous line costs what a long sentence does, and a line that long holds
    # more than max_len tokens, so training drops its pair anyway.
    longest = TRAINING_CHARS_PER_POSITION * max_len
    with progress_bar(count, "tokenizer: counting words", progress, unit=" sentences") as bar:
        tokenizer = Tokenizer.train(counted((text[:longest] for text in texts), bar), vocab_size,
                                    min_frequency,
                                    show_progress=progress and sys.stderr.isatty(), tags=tags)
    info = {
        "vocab_size": vocab_size,
        "actual_vocab_size": tokenizer.vocab_size,
        "min_frequency": min_frequency,
        "trained_on": trained_on.to_json(),
        "fingerprint": tokenizer.fingerprint,
        **({"tags": list(tags)} if tags else {}),
    }
    # The description first: a tokenizer.json is never found without the description that checks it; the manifest
    # last, holding both files' sha256.
    atomic_write_json(out / TOKENIZER_INFO_FILE, info)
    tokenizer.save(out / TOKENIZER_FILE)
    write_manifest(out, PREPARED_KIND, files=[TOKENIZER_FILE, TOKENIZER_INFO_FILE])
    return tokenizer


def counted(texts: Iterable[str], bar) -> Iterable[str]:
    """``texts``, moving ``bar`` on by every ten thousand the trainer takes."""
    iterator = iter(texts)
    while batch := list(itertools.islice(iterator, 10_000)):
        yield from batch
        bar.update(len(batch))
