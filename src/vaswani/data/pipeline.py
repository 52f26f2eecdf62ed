"""From a dataset name to encoded, cached splits and their tokenizer: what ``vaswani prepare`` and training call.

``prepare_dataset`` trains the shared BPE on the training split (source and target together) unless
``out_dir/tokenizer.json`` exists, then encodes each requested split into ``out_dir/cache/`` (or loads it from
there). Running it again is cheap: the tokenizer is loaded and every split comes from the cache.

``out_dir`` holds a manifest (``vaswani.json``, kind "prepared data") with the sha256 of ``tokenizer.json`` and
``tokenizer_info.json``: a changed or damaged tokenizer is named, never used to encode (or decode) a word. Each cache
entry carries its own manifest (see preprocess.py).
"""

from __future__ import annotations

import itertools
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from vaswani.data.corpora import (
    DEFAULT_DATASET,
    ParallelCorpus,
    default_vocab_size,
    load_corpus,
    load_parallel_files,
    load_tsv,
    parse_direction,
)
from vaswani.data.preprocess import DEFAULT_MAX_LEN, EncodedCorpus, prepare
from vaswani.data.tokenizer import MIN_VOCAB_SIZE, Tokenizer
from vaswani.errors import ConfigError, DataError
from vaswani.io import (
    MANIFEST_FILE,
    atomic_write_json,
    probe_writable,
    read_json,
    read_manifest,
    verify_files,
    write_manifest,
)

logger = logging.getLogger(__name__)

DEFAULT_SPLITS = ("train", "val", "test")
TOKENIZER_FILE = "tokenizer.json"
TOKENIZER_INFO_FILE = "tokenizer_info.json"  # how the tokenizer was trained, to catch a mismatched --vocab-size
PREPARED_KIND = "prepared data"  # the manifest's kind: tokenizer.json and tokenizer_info.json with their sha256
# Characters of a line the tokenizer learns from, per position of max_len: a sentence that fits max_len tokens is
# far shorter.
TRAINING_CHARS_PER_POSITION = 64


@dataclass
class PreparedData:
    """The tokenizer and the encoded splits, keyed by the split names that were asked for ("train", "val", …)."""

    tokenizer: Tokenizer
    splits: dict[str, EncodedCorpus]
    out_dir: Path
    tokenizer_path: Path
    tokenizer_trained: bool = False  # False when an existing tokenizer.json was loaded
    tokenizer_seconds: float = 0.0
    corpora: dict[str, ParallelCorpus] = field(default_factory=dict, repr=False)  # raw text, for references


def default_out_dir(dataset: str, direction: str, vocab_size: int) -> Path:
    return Path("runs") / "data" / f"{dataset}-{direction}-{vocab_size}"


def prepared_out_dir(out_dir: str | Path | None, dataset: str, direction: str, vocab_size: int | None,
                     local: bool) -> Path:
    """Where :func:`prepare_dataset` writes: ``out_dir``, else the default folder of the dataset ("local" for a
    corpus of the user's own files), its direction and vocabulary size."""
    if out_dir is not None:
        return Path(out_dir)
    dataset = "local" if local else dataset
    return default_out_dir(dataset, direction, vocab_size if vocab_size is not None else default_vocab_size(dataset))


PREPARED_FILES = (TOKENIZER_FILE, TOKENIZER_INFO_FILE, MANIFEST_FILE, "cache")  # what prepare writes into its folder


def prepare_dataset(
    dataset: str = DEFAULT_DATASET,
    splits: Sequence[str] = DEFAULT_SPLITS,
    data_dir: str | Path | None = None,
    out_dir: str | Path | None = None,
    vocab_size: int | None = None,
    max_len: int = DEFAULT_MAX_LEN,
    direction: str = "de-en",
    train_split: str = "train",
    src_file: str | Path | None = None,
    tgt_file: str | Path | None = None,
    tsv_file: str | Path | None = None,
    tokenizer_path: str | Path | None = None,
    min_frequency: int = 2,
    cache_dir: str | Path | None = None,
    mirror: str | None = None,
) -> PreparedData:
    """Tokenizer + encoded splits for ``dataset`` (or a local corpus given by ``src_file``/``tgt_file`` or
    ``tsv_file``, which is then the only, "train", split).

    ``splits`` are dataset split names or the roles "train", "val", "test"; ``train_split`` says which split
    plays "train" (e.g. "train-extra" for offline WMT17). ``tokenizer_path`` uses an existing tokenizer.json
    instead of out_dir's. ``data_dir``/``cache_dir``/``mirror`` say where corpus files are found (download.py).
    """
    src_lang, tgt_lang = parse_direction(direction)
    local = src_file is not None or tgt_file is not None or tsv_file is not None
    if local:
        if tsv_file is not None and (src_file is not None or tgt_file is not None):
            raise ConfigError("give either a TSV file or a source and a target file, not both")
        if tsv_file is None and (src_file is None or tgt_file is None):
            raise ConfigError("a local corpus needs both a source file and a target file (or one TSV file)")
        dataset = "local"
        splits = ["train"]
    # Settings are checked before any work (a tokenizer trained for nothing, files written for nothing).
    if vocab_size is not None and vocab_size < MIN_VOCAB_SIZE:
        raise ConfigError(f"vocab_size={vocab_size} is too small: a byte-level BPE needs at least {MIN_VOCAB_SIZE}")
    if max_len < 2:
        raise ConfigError(f"max_len={max_len} is too small: it counts <s> or </s>, so 2 is the least that holds a "
                          "token")
    if min_frequency < 1:
        raise ConfigError(f"min_frequency={min_frequency} must be >= 1")
    out = prepared_out_dir(out_dir, dataset, direction, vocab_size, local)
    vocab_size = vocab_size if vocab_size is not None else default_vocab_size(dataset)
    kind = read_manifest(out).kind if (out / MANIFEST_FILE).is_file() else PREPARED_KIND
    if kind != PREPARED_KIND:  # a checkpoint's tokenizer.json is not prepared data, and its folder is no cache
        raise ConfigError(f"{out} is a {kind} (see its {MANIFEST_FILE}), not a prepared-data directory; pick another "
                          "output directory")
    probe_writable(out, f"output directory {out}")  # made when the first file is written: a refusal leaves none

    def load(split: str) -> ParallelCorpus:
        if tsv_file is not None:
            return load_tsv(tsv_file, src_lang=src_lang, tgt_lang=tgt_lang)
        if local:
            return load_parallel_files(src_file, tgt_file, src_lang=src_lang, tgt_lang=tgt_lang)
        name = train_split if split == "train" else split
        return load_corpus(dataset, name, direction, data_dir=data_dir, cache_dir=cache_dir, mirror=mirror)

    corpora: dict[str, ParallelCorpus] = {}
    tok_path = Path(tokenizer_path) if tokenizer_path is not None else out / TOKENIZER_FILE
    tokenizer, trained, seconds = _get_tokenizer(out, tokenizer_path, vocab_size, min_frequency, max_len, load,
                                                 corpora)
    result: dict[str, EncodedCorpus] = {}
    for split in splits:
        if split not in corpora:  # the training split is already loaded when the tokenizer was trained
            corpora[split] = load(split)
        corpus = corpora[split]
        result[split] = prepare(corpus, tokenizer, out / "cache", max_len)
        logger.debug("%s %s: %s", dataset, split, result[split].stats.summary())
    return PreparedData(tokenizer, result, out, tok_path, trained, seconds, corpora)


def _get_tokenizer(out: Path, tokenizer_path, vocab_size: int, min_frequency: int, max_len: int, load,
                   corpora: dict):
    """Load out/tokenizer.json (or ``tokenizer_path``), or train one on the training split and save it. The BPE
    learns from the first ``TRAINING_CHARS_PER_POSITION * max_len`` characters of each line, cut before it is
    tokenized as every encoding cuts: one enormous line costs what a long sentence does, and a line that long holds
    more than ``max_len`` tokens, so training drops its pair anyway."""
    if tokenizer_path is not None:
        return Tokenizer.load(tokenizer_path), False, 0.0
    path = out / TOKENIZER_FILE
    info_path = out / TOKENIZER_INFO_FILE
    manifest = read_manifest(out)
    if manifest is not None:
        verify_files(out, manifest)  # the tokenizer and its description, as prepare wrote them
    if path.is_file():
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
                raise ConfigError(
                    f"{path} was trained with vocab_size={info['vocab_size']}, not {vocab_size}; "
                    "choose another output directory or delete it"
                )
        return tokenizer, False, 0.0
    start = time.perf_counter()
    corpus = load("train")
    corpora["train"] = corpus
    logger.info("training a %d-token BPE on %s train (%d sentences)", vocab_size, corpus.name, 2 * len(corpus))
    longest = TRAINING_CHARS_PER_POSITION * max_len
    lines = (line[:longest] for line in itertools.chain(corpus.source, corpus.target))
    tokenizer = Tokenizer.train(lines, vocab_size, min_frequency)
    info = {
        "vocab_size": vocab_size,
        "actual_vocab_size": tokenizer.vocab_size,
        "min_frequency": min_frequency,
        "trained_on": {"name": corpus.name, "split": corpus.split, "checksum": corpus.checksum},
        "fingerprint": tokenizer.fingerprint,
    }
    # The description first: a tokenizer.json is never found without the description that checks it; the manifest
    # last, holding both files' sha256.
    atomic_write_json(info_path, info)
    tokenizer.save(path)
    write_manifest(out, PREPARED_KIND, files=[TOKENIZER_FILE, TOKENIZER_INFO_FILE])
    return tokenizer, True, time.perf_counter() - start

