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
    source.txt target.txt             only for pairs held out of the user's training files: their text
    vaswani.json                      the manifest: "preprocessing cache", each file's size and sha256

The user's files are encoded as a stream (:func:`prepare_files`): batches of lines are decoded and encoded in one
process per core, and each array is written as it grows, so neither the text nor the ids are ever whole in memory.

Arrays are loaded memory-mapped, so DataLoader workers share their pages instead of copying them. Opening a cache
checks every file against the sha256 its manifest records (about 1 GB/s) and the arrays against each other (offsets
that only grow, ids inside the vocabulary, lengths inside max_len), so a damaged cache is named, never read as
data. :func:`prepare` then rebuilds it in place from the corpus.
"""

from __future__ import annotations

import collections
import logging
import multiprocessing
import os
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Sequence

import numpy as np

from vaswani.data.cache import (
    ARRAYS,
    CACHE_KIND,
    EncodedCorpus,
    FileArrays,
    MemoryArrays,
    PrepareStats,
    cache_path,
    ids_dtype,
    is_whole_cache,
    load_arrays,
    load_cached,
    save_encoded,
    write_cache_meta,
)
from vaswani.data.corpora import CorpusInfo, ParallelCorpus
from vaswani.data.corpus_encoder import CorpusEncoder
from vaswani.data.files import FileSplit, LineChunk, decode_chunk, progress_bar, read_chunks
from vaswani.data.tokenizer import Tokenizer
from vaswani.errors import ConfigError, DataError
from vaswani.io import directory_written_whole

logger = logging.getLogger(__name__)

DEFAULT_MAX_LEN = 64
ENCODE_CHUNK = 20_000  # pairs encoded at a time from an in-memory corpus: bounds the memory of Python lists


# ------------------------------------------------------------------------------------------------ prepare


def prepare(
    corpus: ParallelCorpus,
    tokenizer: Tokenizer,
    cache_root: str | Path | None = None,
    max_len: int = DEFAULT_MAX_LEN,
) -> EncodedCorpus:
    """Encode, filter and cache ``corpus``; a second call with the same inputs loads the cache instead.
    ``cache_root=None`` encodes in memory without caching."""
    check_max_len(max_len)
    path = cache_path(cache_root, corpus, tokenizer, max_len) if cache_root is not None else None
    cached = load_cached(path, tokenizer, corpus.files or [corpus.name])
    if cached is not None:
        return cached
    encoded = encode_corpus(corpus, tokenizer, max_len)
    if path is not None:
        save_encoded(encoded, path, corpus.info)
    return encoded


def prepare_files(
    split: FileSplit,
    info: CorpusInfo,
    pairs: int,
    tokenizer: Tokenizer,
    cache_root: str | Path,
    max_len: int = DEFAULT_MAX_LEN,
    exclude: np.ndarray | None = None,
    progress: bool = False,
    workers: int | None = None,
    build: bool = False,
) -> EncodedCorpus:
    """Encode, filter and cache the ``pairs`` pairs of a split of files, streamed from disk (see files.py) and
    encoded by ``workers`` processes (default: one per core); the pairs at the sorted indices ``exclude`` are left
    out (held out for validation). ``info`` names the split and keys its cache, so a second call loads it (unless
    ``build``: the caller found no whole cache there)."""
    check_max_len(max_len)
    path = cache_path(cache_root, info, tokenizer, max_len)
    cached = None if build else load_cached(path, tokenizer, list(info.files))
    if cached is not None:
        return cached
    start = time.perf_counter()
    chunks = read_chunks(split)
    workers = workers or len(os.sched_getaffinity(0))
    if workers > 1 and pairs >= PARALLEL_MIN_PAIRS:
        encoded_chunks = _in_processes(chunks, tokenizer, max_len, workers)
    else:
        encoder = CorpusEncoder(tokenizer)
        encoded_chunks = (_encode_chunk(encoder, chunk.start, *decode_chunk(chunk), max_len) for chunk in chunks)
    with directory_written_whole(path, kind=CACHE_KIND, keep=is_whole_cache) as staging, \
            FileArrays(staging, ids_dtype(tokenizer.vocab_size)) as arrays:
        filtered = _Filter(max_len, tokenizer, arrays, exclude)
        with progress_bar(pairs, f"encoding {info.split}", progress) as bar:
            for chunk in encoded_chunks:
                filtered.add(chunk)
                bar.update(chunk.pairs)
        stats = filtered.finish(info, time.perf_counter() - start).stats
        write_cache_meta(staging, tokenizer.fingerprint, stats, info)
    # Read back memory-mapped, as a later run opens it (what was just written needs no checking against itself).
    return EncodedCorpus(**load_arrays(path), tokenizer_fingerprint=tokenizer.fingerprint, stats=stats,
                         name=info.name, split=info.split, path=path, corpus_checksum=info.checksum)


def check_max_len(max_len: int) -> None:
    if max_len < 2:
        raise ConfigError(f"max_len={max_len} must be at least 2 (one token plus <s> or </s>)")


def encode_corpus(corpus: ParallelCorpus, tokenizer: Tokenizer, max_len: int = DEFAULT_MAX_LEN) -> EncodedCorpus:
    """Encode both sides of an in-memory corpus and drop empty and over-long pairs (no caching)."""
    check_max_len(max_len)
    start = time.perf_counter()
    encoder = CorpusEncoder(tokenizer)
    filtered = _Filter(max_len, tokenizer, MemoryArrays(ids_dtype(tokenizer.vocab_size)))
    for begin in range(0, len(corpus), ENCODE_CHUNK):
        end = begin + ENCODE_CHUNK
        filtered.add(_encode_chunk(encoder, begin, corpus.source[begin:end], corpus.target[begin:end], max_len))
    return filtered.finish(corpus.info, time.perf_counter() - start)


@dataclass
class EncodedChunk:
    """Both sides of consecutive pairs, encoded: ids back to back and ids per sentence (at most max_len)."""

    start: int  # index of the first pair in its split
    src_ids: np.ndarray
    src_lengths: np.ndarray
    tgt_ids: np.ndarray
    tgt_lengths: np.ndarray

    @property
    def pairs(self) -> int:
        return len(self.src_lengths)


def _encode_chunk(encoder: CorpusEncoder, start: int, source: Sequence[str], target: Sequence[str],
                  max_len: int) -> EncodedChunk:
    # Ids past max_len decide nothing (such a pair is dropped either way): each line is encoded up to max_len ids,
    # so one enormous line costs no more than a long sentence.
    dtype = ids_dtype(encoder.tokenizer.vocab_size)
    src_ids, src_lengths = encoder.encode([text.strip() for text in source], max_ids=max_len)
    tgt_ids, tgt_lengths = encoder.encode([text.strip() for text in target], max_ids=max_len)
    return EncodedChunk(start, src_ids.astype(dtype), src_lengths.astype(np.int32), tgt_ids.astype(dtype),
                        tgt_lengths.astype(np.int32))


class _Filter:
    """Keeps the pairs the length rule allows (and not excluded) from encoded chunks, in order, into ``arrays``,
    and counts what it kept and dropped."""

    def __init__(self, max_len: int, tokenizer: Tokenizer, arrays: MemoryArrays | FileArrays,
                 exclude: np.ndarray | None = None) -> None:
        self.max_len, self.tokenizer, self.arrays = max_len, tokenizer, arrays
        self.exclude = exclude if exclude is not None else np.zeros(0, dtype=np.int64)
        self.pairs_in = self.kept = self.empty = self.too_long = 0
        self.token_sums = [0, 0]
        self.token_max = [0, 0]
        self.offsets = [0, 0]
        for name in ("src_offsets", "tgt_offsets"):
            arrays.append(name, np.zeros(1, dtype=np.int64))

    def add(self, chunk: EncodedChunk) -> None:
        n = chunk.pairs
        src_lengths, tgt_lengths = chunk.src_lengths.astype(np.int64), chunk.tgt_lengths.astype(np.int64)
        held_out = np.zeros(n, dtype=bool)
        lo, hi = np.searchsorted(self.exclude, [chunk.start, chunk.start + n])
        held_out[self.exclude[lo:hi] - chunk.start] = True
        empty = ~held_out & ((src_lengths == 0) | (tgt_lengths == 0))
        too_long = ~held_out & ~empty & ((src_lengths + 1 > self.max_len) | (tgt_lengths + 1 > self.max_len))
        keep = ~(held_out | empty | too_long)
        self.pairs_in += n - int(held_out.sum())
        self.empty += int(empty.sum())
        self.too_long += int(too_long.sum())
        self.kept += int(keep.sum())
        # Select the kept pairs' tokens with one boolean mask over the flat arrays (no per-pair Python loop).
        for side, (ids, lengths) in enumerate(((chunk.src_ids, src_lengths), (chunk.tgt_ids, tgt_lengths))):
            kept_lengths = lengths[keep]
            name = ("src", "tgt")[side]
            self.arrays.append(f"{name}_ids", ids[np.repeat(keep, lengths)])
            self.arrays.append(f"{name}_offsets", self.offsets[side] + np.cumsum(kept_lengths))
            self.offsets[side] += int(kept_lengths.sum())
            self.token_sums[side] += int(kept_lengths.sum())
            self.token_max[side] = max(self.token_max[side], int(kept_lengths.max(initial=0)))
        self.arrays.append("line_index", chunk.start + np.flatnonzero(keep).astype(np.int64))

    def finish(self, info: CorpusInfo, seconds: float) -> EncodedCorpus:
        kept = max(self.kept, 1)
        stats = PrepareStats(
            pairs_in=self.pairs_in, pairs_kept=self.kept, dropped={"empty": self.empty, "too_long": self.too_long},
            max_len=self.max_len, src_tokens_mean=self.token_sums[0] / kept if self.kept else 0.0,
            src_tokens_max=self.token_max[0], tgt_tokens_mean=self.token_sums[1] / kept if self.kept else 0.0,
            tgt_tokens_max=self.token_max[1], vocab_size=self.tokenizer.vocab_size, seconds=seconds,
        )
        if stats.pairs_kept == 0:
            raise DataError(
                f"{info.name} ({info.split}): no pair survives preprocessing ({self.empty} with an empty side, "
                f"{self.too_long} longer than max_len={self.max_len}); files: {', '.join(info.files) or info.name}"
            )
        arrays = self.arrays.finish()
        return EncodedCorpus(**{name: arrays.get(name) for name in ARRAYS},
                             tokenizer_fingerprint=self.tokenizer.fingerprint, stats=stats, name=info.name,
                             split=info.split)


# ------------------------------------------------------------------------------------- encoding in processes

PARALLEL_MIN_PAIRS = 100_000  # fewer pairs take less time than starting the worker processes
_worker: dict = {}  # a worker process's encoder and settings, set up once by _start_worker


def _in_processes(chunks: Iterator[LineChunk], tokenizer: Tokenizer, max_len: int,
                  workers: int) -> Iterator[EncodedChunk]:
    """Each chunk decoded and encoded in one of ``workers`` processes, yielded in order; at most two chunks per
    worker are read ahead, so memory stays flat however large the corpus."""
    context = multiprocessing.get_context("spawn")  # no fork of a process that may hold torch's threads
    pool = ProcessPoolExecutor(workers, mp_context=context, initializer=_start_worker,
                               initargs=(tokenizer.to_str(), max_len))
    pending: collections.deque = collections.deque()
    try:
        for chunk in chunks:
            pending.append(pool.submit(_encode_in_worker, chunk))
            if len(pending) >= 2 * workers:
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def _start_worker(tokenizer_json: str, max_len: int) -> None:
    os.environ["TOKENIZERS_PARALLELISM"] = "false"  # one process per core already
    _worker["encoder"] = CorpusEncoder(Tokenizer.from_str(tokenizer_json))
    _worker["max_len"] = max_len


def _encode_in_worker(chunk: LineChunk) -> EncodedChunk:
    return _encode_chunk(_worker["encoder"], chunk.start, *decode_chunk(chunk), _worker["max_len"])


# ----------------------------------------------------------------------------------------- cache on disk


