"""Encode a parallel corpus once, filter it, and cache the token ids as flat numpy arrays.

Length rule (what ``max_len`` means). The model sees a pair with ``n`` source and ``m`` target BPE tokens as

    src     = x1 … xn </s>        n + 1 positions (the encoder input)
    tgt_in  = <s> y1 … ym         m + 1 positions (the decoder input)
    tgt_out = y1 … ym </s>        m + 1 positions (what the decoder must predict)

so a pair is kept iff ``1 <= n`` and ``1 <= m`` (no empty side) and ``n + 1 <= max_len`` and
``m + 1 <= max_len``. ``max_len`` is therefore the number of positions the model's position table must cover,
the same meaning as ``ModelConfig.max_len``. Lines are stripped of surrounding whitespace before encoding.

Cache layout (one directory per corpus/tokenizer/settings, named by a sha256 key)::

    src_ids.npy  tgt_ids.npy          all token ids of one side back to back (uint16 if vocab < 65536)
    src_offsets.npy tgt_offsets.npy   int64, len = pairs + 1; pair i is ids[offsets[i]:offsets[i+1]]
    line_index.npy                    int64, the corpus line each kept pair came from (to find references)
    meta.json                         tokenizer fingerprint, corpus checksum, settings, statistics
    vaswani.json                      the manifest: "preprocessing cache", each file's size and sha256

Arrays are loaded memory-mapped, so DataLoader workers share their pages instead of copying them. Opening a cache
checks every file against the sha256 its manifest records (about 1 GB/s) and the arrays against each other (offsets
that only grow, ids inside the vocabulary, lengths inside max_len), so a damaged cache is named, never read as
data. :func:`prepare` then rebuilds it in place from the corpus.
"""

from __future__ import annotations

import itertools
import json
import logging
import shutil
import time
from dataclasses import asdict, dataclass, field
from functools import cached_property
from pathlib import Path

import numpy as np

from vaswani.data.corpora import ParallelCorpus
from vaswani.data.tokenizer import Tokenizer
from vaswani.errors import ConfigError, DataError, VaswaniError
from vaswani.io import (
    atomic_write_json,
    bytes_sha256,
    install_directory,
    named_as,
    read_json,
    read_manifest,
    staging_directory,
    verify_files,
    write_manifest,
    writing,
)

logger = logging.getLogger(__name__)

CACHE_FORMAT = 2  # bump when the layout or the filtering rule changes: old caches get a new key
CACHE_KIND = "preprocessing cache"
DEFAULT_MAX_LEN = 64
ENCODE_CHUNK = 100_000  # sentences per encode_batch call: bounds the memory of Python id lists
ARRAYS = ("src_ids", "src_offsets", "tgt_ids", "tgt_offsets", "line_index")


@dataclass
class PrepareStats:
    """What preprocessing kept and dropped, and the token counts of what it kept (BPE tokens, no <s>/</s>)."""

    pairs_in: int
    pairs_kept: int
    dropped: dict[str, int]  # reason -> pairs: "empty" (a side is blank), "too_long" (a side > max_len - 1)
    max_len: int
    src_tokens_mean: float
    src_tokens_max: int
    tgt_tokens_mean: float
    tgt_tokens_max: int
    vocab_size: int
    seconds: float = 0.0  # time to encode (or to load, when from_cache)
    from_cache: bool = False

    def summary(self) -> str:
        dropped = ", ".join(f"{reason} {count:,}" for reason, count in self.dropped.items())
        return (
            f"{self.pairs_kept:,}/{self.pairs_in:,} pairs kept (dropped: {dropped}); tokens per side "
            f"src mean {self.src_tokens_mean:.1f} max {self.src_tokens_max}, tgt mean {self.tgt_tokens_mean:.1f} "
            f"max {self.tgt_tokens_max}; vocab {self.vocab_size:,}; "
            f"{'loaded from cache' if self.from_cache else 'encoded'} in {self.seconds:.2f} s"
        )


@dataclass
class EncodedCorpus:
    """Token ids of a filtered parallel corpus, stored flat; ``source(i)``/``target(i)`` are numpy views."""

    src_ids: np.ndarray
    src_offsets: np.ndarray
    tgt_ids: np.ndarray
    tgt_offsets: np.ndarray
    line_index: np.ndarray  # corpus line of each pair (the raw text of pair i is corpus.source[line_index[i]])
    tokenizer_fingerprint: str
    stats: PrepareStats
    name: str = ""
    split: str = ""
    path: Path | None = None  # the cache directory, when loaded from or saved to one
    meta: dict = field(default_factory=dict, repr=False)

    @classmethod
    def from_sequences(
        cls, sources: list, targets: list, tokenizer_fingerprint: str = "", vocab_size: int = 1 << 16
    ) -> "EncodedCorpus":
        """An in-memory corpus from id sequences (already filtered), e.g. for tests or synthetic data."""
        if len(sources) != len(targets):
            raise DataError(f"{len(sources)} source sequences but {len(targets)} target sequences")
        dtype = ids_dtype(vocab_size)
        src_lens = np.array([len(s) for s in sources], dtype=np.int64)
        tgt_lens = np.array([len(t) for t in targets], dtype=np.int64)
        flat = lambda seqs: np.fromiter(itertools.chain.from_iterable(seqs), dtype=dtype)  # noqa: E731
        stats = PrepareStats(
            pairs_in=len(sources), pairs_kept=len(sources), dropped={"empty": 0, "too_long": 0},
            max_len=int(max(src_lens.max(initial=0), tgt_lens.max(initial=0))) + 1,
            src_tokens_mean=float(src_lens.mean()) if len(src_lens) else 0.0, src_tokens_max=int(src_lens.max(initial=0)),
            tgt_tokens_mean=float(tgt_lens.mean()) if len(tgt_lens) else 0.0, tgt_tokens_max=int(tgt_lens.max(initial=0)),
            vocab_size=vocab_size,
        )
        return cls(
            src_ids=flat(sources), src_offsets=offsets_from_lengths(src_lens),
            tgt_ids=flat(targets), tgt_offsets=offsets_from_lengths(tgt_lens),
            line_index=np.arange(len(sources), dtype=np.int64),
            tokenizer_fingerprint=tokenizer_fingerprint, stats=stats,
        )

    def __len__(self) -> int:
        return len(self.src_offsets) - 1

    @cached_property
    def src_lengths(self) -> np.ndarray:
        """BPE tokens per source sentence (without </s>)."""
        return np.diff(self.src_offsets)

    @cached_property
    def tgt_lengths(self) -> np.ndarray:
        """BPE tokens per target sentence (without <s>/</s>)."""
        return np.diff(self.tgt_offsets)

    def source(self, i: int) -> np.ndarray:
        return self.src_ids[self.src_offsets[i] : self.src_offsets[i + 1]]

    def target(self, i: int) -> np.ndarray:
        return self.tgt_ids[self.tgt_offsets[i] : self.tgt_offsets[i + 1]]

    def __getitem__(self, i: int) -> tuple[int, np.ndarray, np.ndarray]:
        # The index travels with the pair so a batch knows which examples it holds.
        return int(i), self.source(i), self.target(i)

    def __getstate__(self) -> dict:
        # Spawned DataLoader workers pickle the dataset: send the cache path, not a copy of every array.
        state = self.__dict__.copy()
        for key in ("src_lengths", "tgt_lengths"):
            state.pop(key, None)
        if self.path is not None and (self.path / "meta.json").is_file():
            for name in ARRAYS:
                state[name] = None
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        if self.src_ids is None:
            for name, array in _load_arrays(self.path).items():
                setattr(self, name, array)


# ------------------------------------------------------------------------------------------------ prepare


def cache_key(corpus_checksum: str, tokenizer_fingerprint: str, max_len: int) -> str:
    settings = {"format": CACHE_FORMAT, "max_len": max_len, "strip": True}
    text = f"{corpus_checksum}\n{tokenizer_fingerprint}\n{json.dumps(settings, sort_keys=True)}"
    return bytes_sha256(text.encode())


def cache_path(cache_root: str | Path, corpus: ParallelCorpus, tokenizer: Tokenizer, max_len: int) -> Path:
    key = cache_key(corpus.checksum, tokenizer.fingerprint, max_len)
    return Path(cache_root) / f"{corpus.name}-{corpus.split}-{corpus.direction}-{key[:16]}"


def prepare(
    corpus: ParallelCorpus,
    tokenizer: Tokenizer,
    cache_root: str | Path | None = None,
    max_len: int = DEFAULT_MAX_LEN,
    dedup: bool = True,
) -> EncodedCorpus:
    """Encode, filter and cache ``corpus``; a second call with the same inputs loads the cache instead.

    ``cache_root=None`` encodes in memory without caching. ``dedup`` encodes repeated sentences once (same
    result, less time).
    """
    if max_len < 2:
        raise ConfigError(f"max_len={max_len} must be at least 2 (one token plus <s> or </s>)")
    path = cache_path(cache_root, corpus, tokenizer, max_len) if cache_root is not None else None
    if path is not None and path.exists():
        try:
            return load_encoded(path, tokenizer)
        except CacheDamaged as error:
            logger.warning("%s: %s; rebuilding it from %s", path, error.problem, ", ".join(corpus.files) or corpus.name)
    encoded = encode_corpus(corpus, tokenizer, max_len, dedup)
    if path is not None:
        save_encoded(encoded, path, corpus)
    return encoded


def encode_corpus(
    corpus: ParallelCorpus, tokenizer: Tokenizer, max_len: int = DEFAULT_MAX_LEN, dedup: bool = True
) -> EncodedCorpus:
    """Encode both sides with the batch encoder and drop empty and over-long pairs (no caching)."""
    start = time.perf_counter()
    dtype = ids_dtype(tokenizer.vocab_size)
    # Ids past max_len decide nothing (such a pair is dropped either way): each line is encoded up to max_len ids,
    # so one enormous line costs no more than a long sentence.
    src_ids, src_lens = encode_side(corpus.source, tokenizer, dtype, dedup, max_ids=max_len)
    tgt_ids, tgt_lens = encode_side(corpus.target, tokenizer, dtype, dedup, max_ids=max_len)

    empty = (src_lens == 0) | (tgt_lens == 0)
    too_long = ~empty & ((src_lens + 1 > max_len) | (tgt_lens + 1 > max_len))
    keep = ~(empty | too_long)
    # Select the kept pairs' tokens with one boolean mask over the flat arrays (no per-pair Python loop).
    src_ids = src_ids[np.repeat(keep, src_lens)]
    tgt_ids = tgt_ids[np.repeat(keep, tgt_lens)]
    src_lens, tgt_lens = src_lens[keep], tgt_lens[keep]

    stats = PrepareStats(
        pairs_in=len(corpus),
        pairs_kept=int(keep.sum()),
        dropped={"empty": int(empty.sum()), "too_long": int(too_long.sum())},
        max_len=max_len,
        src_tokens_mean=float(src_lens.mean()) if len(src_lens) else 0.0,
        src_tokens_max=int(src_lens.max()) if len(src_lens) else 0,
        tgt_tokens_mean=float(tgt_lens.mean()) if len(tgt_lens) else 0.0,
        tgt_tokens_max=int(tgt_lens.max()) if len(tgt_lens) else 0,
        vocab_size=tokenizer.vocab_size,
    )
    if stats.pairs_kept == 0:
        raise DataError(
            f"{corpus.name} ({corpus.split}): no pair survives preprocessing ({stats.dropped['empty']} with an "
            f"empty side, {stats.dropped['too_long']} longer than max_len={max_len}); files: {', '.join(corpus.files)}"
        )
    stats.seconds = time.perf_counter() - start
    return EncodedCorpus(
        src_ids=src_ids,
        src_offsets=offsets_from_lengths(src_lens),
        tgt_ids=tgt_ids,
        tgt_offsets=offsets_from_lengths(tgt_lens),
        line_index=np.flatnonzero(keep).astype(np.int64),
        tokenizer_fingerprint=tokenizer.fingerprint,
        stats=stats,
        name=corpus.name,
        split=corpus.split,
    )


def encode_side(
    texts: list[str], tokenizer: Tokenizer, dtype: np.dtype, dedup: bool = True, max_ids: int | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """All ids of one side back to back, and the number of ids per sentence (at most ``max_ids`` when given, see
    Tokenizer.encode_batch).

    The BPE encoder is the expensive step (~50 µs of CPU per sentence), so with ``dedup`` each distinct
    sentence is encoded once and its ids are copied to every line that repeats it (real corpora repeat short
    segments such as headlines and boilerplate).
    """
    stripped = [text.strip() for text in texts]
    if not dedup:
        return _encode_texts(stripped, tokenizer, dtype, max_ids)
    first_seen: dict[str, int] = {}
    inverse = np.fromiter(
        (first_seen.setdefault(text, len(first_seen)) for text in stripped), dtype=np.int64, count=len(stripped)
    )
    if len(first_seen) == len(stripped):  # nothing repeats: skip the gather
        return _encode_texts(stripped, tokenizer, dtype, max_ids)
    unique_ids, unique_lengths = _encode_texts(list(first_seen), tokenizer, dtype, max_ids)
    unique_starts = offsets_from_lengths(unique_lengths)[:-1]
    lengths = unique_lengths[inverse]
    # Position p of line j reads unique_ids[unique_starts[inverse[j]] + (p - start of line j)], vectorised.
    line_starts = offsets_from_lengths(lengths)[:-1]
    gather = np.arange(int(lengths.sum()), dtype=np.int64) + np.repeat(unique_starts[inverse] - line_starts, lengths)
    return unique_ids[gather], lengths


def _encode_texts(texts: list[str], tokenizer: Tokenizer, dtype: np.dtype,
                  max_ids: int | None) -> tuple[np.ndarray, np.ndarray]:
    id_chunks, len_chunks = [], []
    for start in range(0, len(texts), ENCODE_CHUNK):
        ids = tokenizer.encode_batch(texts[start : start + ENCODE_CHUNK], max_ids=max_ids)
        lengths = np.fromiter(map(len, ids), dtype=np.int64, count=len(ids))
        # fromiter over a chained iterator stays in C: no Python loop per token.
        id_chunks.append(np.fromiter(itertools.chain.from_iterable(ids), dtype=dtype, count=int(lengths.sum())))
        len_chunks.append(lengths)
    if not id_chunks:
        return np.zeros(0, dtype=dtype), np.zeros(0, dtype=np.int64)
    return np.concatenate(id_chunks), np.concatenate(len_chunks)


def ids_dtype(vocab_size: int) -> np.dtype:
    return np.dtype(np.uint16) if vocab_size <= 1 << 16 else np.dtype(np.int32)


def offsets_from_lengths(lengths: np.ndarray) -> np.ndarray:
    offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    return offsets


# ----------------------------------------------------------------------------------------- cache on disk


class CacheDamaged(DataError):
    """A cache directory that is not what :func:`save_encoded` wrote: a file missing, changed or inconsistent."""

    def __init__(self, path: Path, problem: str):
        super().__init__(f"{path}: {problem}; delete {path} to rebuild it")
        self.problem = problem


def save_encoded(encoded: EncodedCorpus, path: str | Path, corpus: ParallelCorpus | None = None) -> Path:
    """Write the cache into a temporary directory, manifest last, then rename it into place (all or nothing). A
    damaged cache already at ``path`` is replaced; a whole one (written meanwhile by another process with the same
    key: the same content) is kept."""
    path = Path(path)
    tmp = staging_directory(path)
    try:
        for name in ARRAYS:
            with writing(path / f"{name}.npy"):  # named as it will be called: the temporary name means nothing
                np.save(tmp / f"{name}.npy", getattr(encoded, name), allow_pickle=False)
        meta = {
            "format": CACHE_FORMAT,
            "tokenizer_fingerprint": encoded.tokenizer_fingerprint,
            "name": encoded.name,
            "split": encoded.split,
            "corpus_checksum": corpus.checksum if corpus else None,
            "direction": corpus.direction if corpus else None,
            "files": corpus.files if corpus else [],
            "pairs": len(encoded),
            "stats": asdict(encoded.stats),
        }
        with named_as(tmp, path):
            atomic_write_json(tmp / "meta.json", meta)
        with writing(path):
            write_manifest(tmp, CACHE_KIND)
            install_directory(tmp, path, keep=_is_whole)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    encoded.path = path
    encoded.meta = meta
    return path


def _is_whole(path: Path) -> bool:
    try:
        load_encoded(path)
    except DataError:
        return False
    return True


def load_encoded(path: str | Path, tokenizer: Tokenizer | None = None) -> EncodedCorpus:
    """Open a cache directory, checked against its manifest and for consistency (a damaged one is a
    :class:`CacheDamaged` naming what is wrong); with ``tokenizer``, reject a cache that another tokenizer wrote."""
    start = time.perf_counter()
    path = Path(path)
    meta_path = path / "meta.json"
    if not meta_path.is_file() and not path.is_dir():
        raise DataError(f"{meta_path}: not found; {path} is not a preprocessed-data cache")
    try:
        manifest = read_manifest(path)
    except VaswaniError as error:
        raise CacheDamaged(path, str(error).removeprefix(f"{path}/")) from None
    if manifest is None or manifest.kind != CACHE_KIND:
        raise CacheDamaged(path, "no manifest (vaswani.json) of a preprocessing cache, so its arrays cannot be "
                           "checked")
    try:
        verify_files(path, manifest)
        meta = read_json(meta_path, "cache metadata")
    except VaswaniError as error:
        raise CacheDamaged(path, str(error).removeprefix(f"{path}/").split("; ")[0]) from None
    if not isinstance(meta, dict) or meta.get("format") != CACHE_FORMAT:
        format_ = meta.get("format") if isinstance(meta, dict) else None
        raise CacheDamaged(path, f"meta.json: cache format {format_!r} is not {CACHE_FORMAT}")
    if tokenizer is not None and meta.get("tokenizer_fingerprint") != tokenizer.fingerprint:
        raise DataError(
            f"{meta_path}: this cache was written by another tokenizer (fingerprint "
            f"{str(meta.get('tokenizer_fingerprint'))[:12]}…, current tokenizer {tokenizer.fingerprint[:12]}…); "
            f"its token ids mean different words. Delete {path} or use the tokenizer.json it was made with"
        )
    arrays = _load_arrays(path)
    try:
        stats = PrepareStats(**meta["stats"])
    except (KeyError, TypeError):
        raise CacheDamaged(path, "meta.json: no statistics of the kind prepare writes") from None
    problem = _inconsistency(arrays, meta.get("pairs"), stats)
    if problem:
        raise CacheDamaged(path, f"its arrays are inconsistent ({problem})")
    stats.from_cache = True
    stats.seconds = time.perf_counter() - start
    return EncodedCorpus(
        **arrays,
        tokenizer_fingerprint=meta["tokenizer_fingerprint"],
        stats=stats,
        name=meta.get("name", ""),
        split=meta.get("split", ""),
        path=path,
        meta=meta,
    )


def _inconsistency(arrays: dict[str, np.ndarray], pairs: object, stats: PrepareStats) -> str | None:
    """What makes the arrays unlike a cache prepare wrote (None when they are alike): shapes, offsets that start at
    0, only grow and end at the ids' length, pair lengths inside max_len, ids inside the vocabulary, line numbers
    that only grow. Vectorised: a Multi30k cache is checked in milliseconds."""
    n = len(arrays["src_offsets"]) - 1
    if pairs != n or n < 0 or len(arrays["tgt_offsets"]) != n + 1 or len(arrays["line_index"]) != n:
        return "the number of pairs differs between files"
    for side in ("src", "tgt"):
        ids, offsets = arrays[f"{side}_ids"], arrays[f"{side}_offsets"]
        if ids.ndim != 1 or offsets.ndim != 1 or offsets[0] != 0 or offsets[-1] != len(ids):
            return f"{side}_offsets do not cover {side}_ids"
        lengths = np.diff(offsets)
        if len(lengths) and (lengths.min() < 1 or lengths.max() > stats.max_len - 1):
            return f"a {side} sentence of {lengths.min() if lengths.min() < 1 else lengths.max()} tokens, outside " \
                   f"1..{stats.max_len - 1}"
        if len(ids) and int(ids.max()) >= stats.vocab_size:
            return f"{side} id {int(ids.max())} outside the vocabulary of {stats.vocab_size}"
    line_index = arrays["line_index"]
    if n and (line_index[0] < 0 or (n > 1 and np.diff(line_index).min() < 1)):
        return "line numbers that do not grow"
    return None


def _load_arrays(path: Path) -> dict[str, np.ndarray]:
    arrays = {}
    for name in ARRAYS:
        file = path / f"{name}.npy"
        try:
            arrays[name] = np.load(file, mmap_mode="r", allow_pickle=False)
        except FileNotFoundError:
            raise CacheDamaged(path, f"{name}.npy is missing") from None
        except (OSError, ValueError) as error:
            raise CacheDamaged(path, f"{name}.npy is unreadable ({error})") from None
    return arrays
