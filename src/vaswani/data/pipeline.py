"""From a corpus to encoded, cached splits and their tokenizer: what ``vaswani prepare`` and training call.

A corpus is a registered dataset (``prepare_dataset("multi30k")``) or the user's own files
(``prepare_dataset(files=FileCorpus(...))``, see files.py). Either way the shared BPE is trained on the training
split (source and target together; on a reproducible sample of ``tokenizer_sample`` pairs when it has more) unless
``out_dir/tokenizer.json`` exists, then each split is encoded into ``out_dir/cache/`` (or loaded from there).
Running it again is cheap: the tokenizer is loaded and every split comes from the cache.

The user's files are streamed, never held as Python strings: read once for their sha256 and line counts (which key
the caches), once to check every line and take the tokenizer's sample and the held-out validation pairs, once to
encode (in one process per core). Without validation files, validation pairs are held out of the training files,
chosen from ``seed``; their text is kept in their cache entry.

``out_dir`` holds a manifest (``vaswani.json``, kind "prepared data") with the sha256 of ``tokenizer.json`` and
``tokenizer_info.json``: a changed or damaged tokenizer is named, never used to encode (or decode) a word. Each cache
entry carries its own manifest (see preprocess.py).
"""

from __future__ import annotations

import hashlib
import itertools
import json
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import numpy as np

from vaswani.data.cache import EncodedCorpus, cache_path, load_cached, save_encoded
from vaswani.data.corpora import CorpusInfo, ParallelCorpus, load_corpus, wmt17_train_files
from vaswani.data.download import resolve_file
from vaswani.data.files import TRAIN, VALID, FileCorpus, FileSplit, file_part, held_out_count, local_corpus, scan
from vaswani.data.fingerprints import SplitFingerprint, fingerprint
from vaswani.data.languages import LanguagePair
from vaswani.data.languages import parse_direction as parse_pair
from vaswani.data.phase_clock import PhaseClock
from vaswani.data.prepared_tokenizer import (
    PREPARED_KIND,
    TOKENIZER_FILE,
    TOKENIZER_INFO_FILE,
    TokenizerSample,
    TrainedOn,
    prepared_tokenizer,
    train_prepared_tokenizer,
)
from vaswani.data.preprocess import DEFAULT_MAX_LEN, prepare, prepare_files
from vaswani.data.registry import DEFAULT_DATASET, LOCAL, default_vocab_size, get_dataset, parse_direction
from vaswani.data.textfiles import read_lines
from vaswani.data.tokenizer import MIN_VOCAB_SIZE, Tokenizer
from vaswani.errors import ConfigError, DataError
from vaswani.io import MANIFEST_FILE, check_output, file_sha256, read_manifest, record_inputs

logger = logging.getLogger(__name__)

DEFAULT_SPLITS = ("train", "val", "test")

# Training pairs the tokenizer learns from, both sides (a million sentences, as SentencePiece users often sample):
# a BPE's merges settle long before that, and counting the words of every pair would cost most of the preparation.
DEFAULT_TOKENIZER_SAMPLE = 500_000


@dataclass
class HeldOut:
    """Validation pairs held out of the training files: how many, of how many, chosen from which seed."""

    pairs: int
    of: int
    seed: int

    def describe(self) -> str:
        return f"{self.pairs:,} pairs held out of the {self.of:,} training pairs (seed {self.seed})"


@dataclass
class PreparedData:
    """The tokenizer and the encoded splits, keyed by the split names that were asked for ("train", "val", …)."""

    tokenizer: Tokenizer
    splits: dict[str, EncodedCorpus]
    out_dir: Path
    tokenizer_path: Path
    tokenizer_trained: bool = False  # False when an existing tokenizer.json was loaded
    tokenizer_seconds: float = 0.0
    # raw text, for references: every split of a registered dataset; the validation and test sets of files
    corpora: dict[str, ParallelCorpus] = field(default_factory=dict, repr=False)
    files: dict[str, SplitFingerprint] = field(default_factory=dict)  # each split's files, when it is files
    held_out: HeldOut | None = None
    phases: dict[str, float] = field(default_factory=dict)  # seconds of reading, checking, tokenizer, encoding
    # CPU seconds of each phase (user + system, of this process and the workers it waited for): over its wall
    # seconds, how many cores the phase kept busy
    phase_cpu_seconds: dict[str, float] = field(default_factory=dict)


def default_out_dir(dataset: str, direction: str, vocab_size: int) -> Path:
    return PREPARED_ROOT / f"{dataset}-{direction}-{vocab_size}"


def prepared_out_dir(out_dir: str | Path | None, dataset: str, direction: str, vocab_size: int | None) -> Path:
    """Where :func:`prepare_dataset` writes a registered dataset: ``out_dir``, else the default folder of the
    dataset, its direction and vocabulary size (a corpus of the user's files is keyed by their content instead)."""
    if out_dir is not None:
        return Path(out_dir)
    return default_out_dir(dataset, direction, vocab_size if vocab_size is not None else default_vocab_size(dataset))


PREPARED_ROOT = Path("runs") / "data"  # prepared data when no folder is named, below the current one
PREPARED_FILES = (TOKENIZER_FILE, TOKENIZER_INFO_FILE, MANIFEST_FILE, "cache")  # what prepare writes into its folder


def registered_files(dataset: str, splits: Sequence[str], direction: str, train_split: str = "train",
                     data_dir: str | Path | None = None, cache_dir: str | Path | None = None,
                     mirror: str | None = None) -> FileCorpus | None:
    """A registered dataset whose training split is local files too large to hold as text (the WMT17 training
    corpora, see corpora.wmt17_train_files) as a FileCorpus to stream: its first other split validates, the rest are
    test sets, each by the name asked for. None for every other dataset, which is read into memory."""
    spec = get_dataset(dataset)
    if not spec.resolve_split(train_split).hub:
        return None
    parts = wmt17_train_files(data_dir, direction)
    if parts is None:
        return None
    src_lang, tgt_lang = parse_direction(direction)
    others = []
    for name in (split for split in splits if split != "train"):
        files = []
        for remote in spec.resolve_split(name).parts:
            de, en = (resolve_file(file, data_dir, cache_dir, mirror) for file in remote)
            for file, path in zip(remote, (de, en)):
                if file_sha256(path) != file.sha256:
                    raise DataError(f"{path}: sha256 is not the one of {file.path}; the file is corrupt or a "
                                    "different version. Delete it so that it is downloaded again")
            files.append(file_part((de, en) if src_lang == "de" else (en, de), name))
        others.append(FileSplit(name, tuple(files)))
    return FileCorpus(LanguagePair(src_lang, tgt_lang), FileSplit(TRAIN, tuple(file_part(p, "train") for p in parts)),
                      others[0] if others else None, tuple(others[1:]), name=dataset)


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
    files: FileCorpus | None = None,
    tokenizer_sample: int | None = DEFAULT_TOKENIZER_SAMPLE,
    seed: int = 0,
    progress: bool = False,
    tags: Sequence[str] = (),
) -> PreparedData:
    """Tokenizer + encoded splits for ``dataset``, or for the user's own ``files`` (or a training split given by
    ``src_file``/``tgt_file`` or ``tsv_file``, in ``direction``): then the splits are "train", "valid" and the test
    sets' names, whatever ``splits`` says.

    ``splits`` are dataset split names or the roles "train", "val", "test"; ``train_split`` says which split
    plays "train" (e.g. "train-extra" for offline WMT17). ``tokenizer_path`` uses an existing tokenizer.json
    instead of out_dir's. ``data_dir``/``cache_dir``/``mirror`` say where corpus files are found (download.py).
    ``tokenizer_sample`` bounds the training pairs the tokenizer learns from (None: all), drawn from ``seed``, which
    also chooses held-out validation pairs. ``progress`` shows progress bars on a terminal. ``tags``
    (``data.train_tags``) become special tokens of the tokenizer it trains."""
    if files is None and (src_file is not None or tgt_file is not None or tsv_file is not None):
        if tsv_file is not None and (src_file is not None or tgt_file is not None):
            raise ConfigError("give either a TSV file or a source and a target file, not both")
        if tsv_file is None and (src_file is None or tgt_file is None):
            raise ConfigError("a local corpus needs both a source file and a target file (or one TSV file)")
        pair = parse_pair(direction)
        files = local_corpus([(tsv_file,) if tsv_file else (src_file, tgt_file)], src_lang=pair.source,
                             tgt_lang=pair.target)
    # Settings are checked before any work (a tokenizer trained for nothing, files written for nothing).
    if vocab_size is not None and vocab_size < MIN_VOCAB_SIZE:
        raise ConfigError(f"vocab_size={vocab_size} is too small: a byte-level BPE needs at least {MIN_VOCAB_SIZE}")
    if max_len < 2:
        raise ConfigError(f"max_len={max_len} is too small: it counts <s> or </s>, so 2 is the least holding a token")
    if min_frequency < 1:
        raise ConfigError(f"min_frequency={min_frequency} must be >= 1")
    if tokenizer_sample is not None and tokenizer_sample < 1:
        raise ConfigError(f"tokenizer_sample={tokenizer_sample} must be >= 1 (or None: every training pair)")
    settings = _Settings(vocab_size if vocab_size is not None else default_vocab_size(LOCAL if files else dataset),
                         max_len, min_frequency, tokenizer_sample, seed, progress,
                         tuple(sorted({tag for tag in tags if tag})))
    if files is None and "train" in splits:
        files = registered_files(dataset, splits, direction, train_split, data_dir, cache_dir, mirror)
    if files is not None:
        return _prepare_files(files, out_dir, tokenizer_path, settings)
    parse_direction(direction)
    out = _out_directory(Path(out_dir) if out_dir is not None else default_out_dir(dataset, direction,
                                                                                   settings.vocab_size))

    def load(split: str) -> ParallelCorpus:
        name = train_split if split == "train" else split
        return load_corpus(dataset, name, direction, data_dir=data_dir, cache_dir=cache_dir, mirror=mirror)

    corpora: dict[str, ParallelCorpus] = {}
    tok_path = Path(tokenizer_path) if tokenizer_path is not None else out / TOKENIZER_FILE
    tokenizer = prepared_tokenizer(out, tokenizer_path, settings.vocab_size)
    trained, seconds = tokenizer is None, 0.0
    if tokenizer is None:
        started = time.perf_counter()
        corpora["train"] = corpus = load("train")
        picked, how = _sample(len(corpus), np.zeros(0, dtype=np.int64), settings)
        texts = itertools.chain((corpus.source[i] for i in picked), (corpus.target[i] for i in picked))
        trained_on = TrainedOn(corpus.name, corpus.split, corpus.checksum, how)
        tokenizer = train_prepared_tokenizer(out, texts, 2 * len(picked), trained_on, settings.vocab_size,
                                             settings.min_frequency, settings.max_len, settings.progress)
        seconds = time.perf_counter() - started
    result: dict[str, EncodedCorpus] = {}
    for split in splits:
        if split not in corpora:  # the training split is already loaded when the tokenizer was trained
            corpora[split] = load(split)
        result[split] = prepare(corpora[split], tokenizer, out / "cache", max_len)
        logger.debug("%s %s: %s", dataset, split, result[split].stats.summary())
    return PreparedData(tokenizer, result, out, tok_path, trained, seconds, corpora)


@dataclass
class _Settings:
    vocab_size: int
    max_len: int
    min_frequency: int
    tokenizer_sample: int | None
    seed: int
    progress: bool
    tags: tuple[str, ...] = ()  # the tag tokens of the training parts, sorted: their ids follow this order


def _out_directory(out: Path, inputs: Sequence[Path] = ()) -> Path:
    """``out`` under the output rule (io's check_output), whoever chose it: an option, a default, a record."""
    kind = read_manifest(out).kind if (out / MANIFEST_FILE).is_file() else PREPARED_KIND
    if kind != PREPARED_KIND:  # a checkpoint's tokenizer.json is not prepared data, and its folder is no cache
        raise ConfigError(f"{out} is a {kind} (see its {MANIFEST_FILE}), not a prepared-data directory; pick another "
                          "output directory")
    check_output(out, command="prepare", writes="files", kind=PREPARED_KIND, names=PREPARED_FILES,
                 inputs=inputs, option="prepared data in")  # made by the first file: a refusal leaves none
    return out


def _sample(pairs: int, held_out: np.ndarray, settings: _Settings) -> tuple[np.ndarray, TokenizerSample]:
    """The sorted indices of the training pairs the tokenizer learns from (every pair not held out, or a sample of
    ``tokenizer_sample`` of them drawn from the seed), and how they were chosen."""
    candidates = pairs - len(held_out)
    wanted = settings.tokenizer_sample
    if wanted is None or wanted >= candidates:
        picked = np.setdiff1d(np.arange(pairs, dtype=np.int64), held_out, assume_unique=True)
        return picked, TokenizerSample(int(len(picked)), candidates)
    rng = np.random.default_rng([settings.seed, 1])  # another stream than the held-out pairs'
    positions = np.sort(rng.choice(candidates, size=wanted, replace=False))
    # position p among the pairs not held out is pair p + (held-out pairs at or before it)
    picked = positions + np.searchsorted(held_out - np.arange(len(held_out)), positions, side="right")
    digest = hashlib.sha256(picked.astype("<i8").tobytes()).hexdigest()
    return picked, TokenizerSample(wanted, candidates, settings.seed, digest)


def _held_out(pairs: int, holdout: int, seed: int) -> np.ndarray:
    count = held_out_count(holdout, pairs)
    rng = np.random.default_rng([seed, 0])
    return np.sort(rng.choice(pairs, size=count, replace=False)).astype(np.int64)


def _prepare_files(corpus: FileCorpus, out_dir: str | Path | None, tokenizer_path: str | Path | None,
                   settings: _Settings) -> PreparedData:
    clock = PhaseClock()
    with clock("reading"):
        records = {split.name: fingerprint(split, settings.progress) for split in corpus.splits()}
    train = records[TRAIN]
    valid_name = corpus.valid.name if corpus.valid else VALID
    no_pairs = np.zeros(0, dtype=np.int64)
    held = _held_out(train.pairs, corpus.holdout, settings.seed) if corpus.valid is None else no_pairs
    if corpus.valid is None and len(held) == 0:
        raise DataError(f"{corpus.train.describe()}: {train.pairs} training pair(s) are too few to hold out "
                        "validation pairs from; give validation files (--valid-src/--valid-tgt)")
    held_out = HeldOut(len(held), train.pairs, settings.seed) if corpus.valid is None else None
    # What the tokenizer and every cache here are made from: the files, the held-out choice, the sample.
    identity = {"train": train.checksum, "valid": records[valid_name].checksum if corpus.valid else None,
                "held_out": [held_out.pairs, settings.seed] if held_out else None,
                "tokenizer_sample": settings.tokenizer_sample, "sample_seed": settings.seed,
                "min_frequency": settings.min_frequency, "direction": corpus.languages.direction}
    identity |= {"tags": list(settings.tags)} if settings.tags else {}  # another tokenizer: a folder of its own
    key = hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()
    direction = corpus.languages.direction
    paths = [path for split in corpus.splits() for part in split.parts for path in part.paths]
    out = _out_directory(Path(out_dir) if out_dir is not None else
                         default_out_dir(f"{corpus.name}-{key[:12]}", direction, settings.vocab_size), paths)
    record_inputs(paths, out)  # no later output may overwrite them while this data is on disk
    info = {name: _info(corpus.name, name, record.checksum, record, corpus.languages)
            for name, record in records.items()}
    if held_out is not None:  # the training split without its held-out pairs, and those pairs, are splits of their own
        mark = f"held out {held_out.pairs} of {train.pairs}, seed {settings.seed}"
        info[TRAIN] = _info(corpus.name, TRAIN, _combine(train.checksum, mark), train, corpus.languages)
        info[VALID] = _info(corpus.name, VALID, _combine(train.checksum, mark, VALID), train, corpus.languages)

    # The validation and test files are small: read whole (every line checked), for their references.
    with clock("checking"):
        corpora = {name: _corpus(info[name], *_read_all(split, records[name], settings.progress))
                   for split in corpus.splits() if (name := split.name) != TRAIN}
    tokenizer = prepared_tokenizer(out, tokenizer_path, settings.vocab_size, trained_on=info[TRAIN].checksum)
    cache = out / "cache"
    result: dict[str, EncodedCorpus] = {}
    for name in (TRAIN, *([VALID] if held_out else [])):  # what is cached already (each cache opened once)
        found = load_cached(cache_path(cache, info[name], tokenizer, settings.max_len), tokenizer,
                            list(info[name].files)) if tokenizer is not None else None
        if found is not None:
            result[name] = found
    trained, seconds, held_text = False, 0.0, None
    if TRAIN not in result or (held_out and VALID not in result):  # every line is checked before anything is made
        started = time.perf_counter()
        sample, how = _sample(train.pairs, held, settings) if tokenizer is None else (no_pairs, None)
        watch = {pair for name in (split.name for split in corpus.tests) for pair in
                 zip(corpora[name].source, corpora[name].target)}
        with clock("checking"):
            scanned = scan(corpus.train, train.pairs, np.union1d(sample, held), settings.progress, watch)
        if scanned.watched_found:
            logger.warning("test sets %s: %d of their pairs also occur in the training data (%s); their scores will "
                           "flatter the model", ", ".join(split.name for split in corpus.tests),
                           scanned.watched_found, corpus.train.describe())
        held_text = scanned.text(held)
        if tokenizer is None:
            source, target = scanned.text(sample)
            del scanned  # the sample's text goes as soon as the tokenizer has learnt from it
            trained_on = TrainedOn(corpus.name, TRAIN, info[TRAIN].checksum, how,
                                   tuple(file.path for file in train.files))
            with clock("tokenizer"):
                tokenizer = train_prepared_tokenizer(out, itertools.chain(source, target), 2 * len(sample), trained_on,
                                                     settings.vocab_size, settings.min_frequency, settings.max_len,
                                                     settings.progress, settings.tags)
            del source, target
            trained, seconds = True, time.perf_counter() - started
    if TRAIN not in result:  # the training split first: by far the largest, so the likeliest to fail
        with clock("encoding"):
            result[TRAIN] = prepare_files(corpus.train, info[TRAIN], train.pairs, tokenizer, cache, settings.max_len,
                                          exclude=held, progress=settings.progress, build=True)
    if held_out is not None:
        valid_path = cache_path(cache, info[VALID], tokenizer, settings.max_len)
        if VALID not in result:
            result[VALID] = prepare(_corpus(info[VALID], *held_text), tokenizer, None, settings.max_len)
            save_encoded(result[VALID], valid_path, info[VALID], text=held_text)
        corpora[VALID] = _corpus(info[VALID], *read_cached_text(valid_path))
    for name, text in corpora.items():
        if name not in result:
            result[name] = prepare(text, tokenizer, cache, settings.max_len)
    ordered = {name: result[name] for name in (TRAIN, valid_name, *(split.name for split in corpus.tests))}
    tok_path = Path(tokenizer_path) if tokenizer_path is not None else out / TOKENIZER_FILE
    return PreparedData(tokenizer, ordered, out, tok_path, trained, seconds, corpora, records, held_out,
                        clock.seconds, clock.cpu_seconds)


def _read_all(split: FileSplit, record: SplitFingerprint, progress: bool) -> tuple[list[str], list[str]]:
    scanned = scan(split, record.pairs, np.arange(record.pairs, dtype=np.int64), progress)
    return scanned.source, scanned.target


def _info(name: str, split: str, checksum: str, record: SplitFingerprint, languages: LanguagePair) -> CorpusInfo:
    return CorpusInfo(name, split, languages.source, languages.target, checksum,
                      tuple(file.path for file in record.files))


def read_cached_text(path: Path) -> tuple[list[str], list[str]]:
    """The source and target text a cache entry of held-out pairs keeps beside their ids."""
    return read_lines(path / "source.txt"), read_lines(path / "target.txt")


def _corpus(info: CorpusInfo, source: list[str], target: list[str]) -> ParallelCorpus:
    return ParallelCorpus(info.name, info.split, source, target, info.src_lang, info.tgt_lang, info.checksum,
                          list(info.files))


def _combine(*parts: str) -> str:
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()


