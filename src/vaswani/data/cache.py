"""The preprocessing cache on disk: a corpus's token ids as flat arrays with offsets (memory-mapped when read),
its statistics and what it was made from, written whole with a manifest and checked against it on every load.

    cache/<key>/  src_ids.npy src_offsets.npy tgt_ids.npy tgt_offsets.npy line_index.npy meta.json vaswani.json

The key is the corpus's checksum, the tokenizer's fingerprint and ``max_len`` (:func:`cache_key`): another corpus,
tokenizer or length limit is another entry, never a stale one.
"""

from __future__ import annotations

import io
import itertools
import json
import logging
import time
from dataclasses import asdict, dataclass
from functools import cached_property
from pathlib import Path
from typing import Sequence

import numpy as np

from vaswani.data.corpora import CorpusInfo, ParallelCorpus
from vaswani.data.tokenizer import Tokenizer
from vaswani.errors import DataError, VaswaniError
from vaswani.io import (
    atomic_write_json,
    atomic_write_text,
    bytes_sha256,
    directory_written_whole,
    read_json,
    read_manifest,
    verify_files,
    write_faults_named,
)

logger = logging.getLogger(__name__)

CACHE_FORMAT = 2  # bump when the layout or the filtering rule changes: old caches get a new key


CACHE_KIND = "preprocessing cache"


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
    corpus_checksum: str | None = None  # of the corpus files it was encoded from, as its meta.json records it

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
            src_tokens_mean=float(src_lens.mean()) if len(src_lens) else 0.0,
            src_tokens_max=int(src_lens.max(initial=0)),
            tgt_tokens_mean=float(tgt_lens.mean()) if len(tgt_lens) else 0.0,
            tgt_tokens_max=int(tgt_lens.max(initial=0)),
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

    def __getstate__(self) -> dict[str, object]:
        # Spawned DataLoader workers pickle the dataset: send the cache path, not a copy of every array.
        state = self.__dict__.copy()
        for key in ("src_lengths", "tgt_lengths"):
            state.pop(key, None)
        if self.path is not None and (self.path / "meta.json").is_file():
            for name in ARRAYS:
                state[name] = None
        return state

    def __setstate__(self, state: dict[str, object]) -> None:
        self.__dict__.update(state)
        if self.src_ids is None:
            for name, array in load_arrays(self.path).items():
                setattr(self, name, array)


def cache_key(corpus_checksum: str, tokenizer_fingerprint: str, max_len: int) -> str:
    settings = {"format": CACHE_FORMAT, "max_len": max_len, "strip": True}
    text = f"{corpus_checksum}\n{tokenizer_fingerprint}\n{json.dumps(settings, sort_keys=True)}"
    return bytes_sha256(text.encode())


def cache_path(cache_root: str | Path, corpus: CorpusInfo | ParallelCorpus, tokenizer: Tokenizer,
               max_len: int) -> Path:
    key = cache_key(corpus.checksum, tokenizer.fingerprint, max_len)
    return Path(cache_root) / f"{corpus.name}-{corpus.split}-{corpus.direction}-{key[:16]}"


def load_cached(path: Path | None, tokenizer: Tokenizer, sources: list[str]) -> EncodedCorpus | None:
    """The cache at ``path``, or None when there is none or it is damaged (a warning names what is wrong and the
    ``sources`` it will be rebuilt from)."""
    if path is None or not path.exists():
        return None
    try:
        return load_encoded(path, tokenizer)
    except CacheDamaged as error:
        logger.warning("%s: %s; rebuilding it from %s", path, error.problem, ", ".join(sources))
        return None


class MemoryArrays:
    """The cache's arrays, gathered in memory."""

    def __init__(self, ids_dtype: np.dtype) -> None:
        self.dtype = ids_dtype
        self.parts: dict[str, list[np.ndarray]] = {name: [] for name in ARRAYS}

    def append(self, name: str, values: np.ndarray) -> None:
        self.parts[name].append(values)

    def finish(self) -> dict[str, np.ndarray]:
        dtypes = {"src_ids": self.dtype, "tgt_ids": self.dtype}
        return {name: np.concatenate(parts).astype(dtypes.get(name, np.int64), copy=False) if parts
                else np.zeros(0, dtype=dtypes.get(name, np.int64)) for name, parts in self.parts.items()}


class FileArrays:
    """The cache's arrays, each written as it grows into its ``.npy`` file in ``directory``: the header's room is
    kept at the start and filled with the final shape at the end, so no array is ever whole in memory."""

    HEADER_BYTES = 128  # a 1-d array's .npy header, padded as numpy pads it (to a multiple of 64 bytes)

    def __init__(self, directory: Path, ids_dtype: np.dtype) -> None:
        self.directory = directory
        self.dtypes = {name: ids_dtype if name.endswith("_ids") else np.dtype(np.int64) for name in ARRAYS}
        self.handles = {}
        self.counts = dict.fromkeys(ARRAYS, 0)
        for name in ARRAYS:
            with write_faults_named(directory / f"{name}.npy"):
                handle = open(directory / f"{name}.npy", "wb")
                handle.write(b"\0" * self.HEADER_BYTES)
                self.handles[name] = handle

    def __enter__(self) -> FileArrays:
        return self

    def __exit__(self, *exc_info) -> None:
        for handle in self.handles.values():
            handle.close()

    def append(self, name: str, values: np.ndarray) -> None:
        with write_faults_named(self.directory / f"{name}.npy"):
            self.handles[name].write(np.ascontiguousarray(values, dtype=self.dtypes[name]).tobytes())
        self.counts[name] += len(values)

    def finish(self) -> dict[str, np.ndarray]:
        """Complete every file and close it; the arrays are then read from the cache (memory-mapped)."""
        for name, handle in self.handles.items():
            header = io.BytesIO()
            np.lib.format.write_array_header_1_0(header, {"descr": np.lib.format.dtype_to_descr(self.dtypes[name]),
                                                          "fortran_order": False, "shape": (self.counts[name],)})
            if len(header.getvalue()) != self.HEADER_BYTES:  # never for a 1-d array of these types
                raise AssertionError(f"unexpected .npy header size {len(header.getvalue())}")
            with write_faults_named(self.directory / f"{name}.npy"):
                handle.seek(0)
                handle.write(header.getvalue())
                handle.close()
        return {}


def write_cache_meta(directory: Path, tokenizer_fingerprint: str, stats: PrepareStats,
                     info: CorpusInfo | None) -> None:
    """A cache's meta.json: the tokenizer and corpus it was made from, and its statistics."""
    atomic_write_json(directory / "meta.json", {
        "format": CACHE_FORMAT,
        "tokenizer_fingerprint": tokenizer_fingerprint,
        "name": info.name if info else "",
        "split": info.split if info else "",
        "corpus_checksum": info.checksum if info else None,
        "direction": info.direction if info else None,
        "files": list(info.files) if info else [],
        "pairs": stats.pairs_kept,
        "stats": asdict(stats),
    })


def ids_dtype(vocab_size: int) -> np.dtype:
    return np.dtype(np.uint16) if vocab_size <= 1 << 16 else np.dtype(np.int32)


def offsets_from_lengths(lengths: np.ndarray) -> np.ndarray:
    offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    return offsets


class CacheDamaged(DataError):
    """A cache directory that is not what :func:`save_encoded` wrote: a file missing, changed or inconsistent."""

    def __init__(self, path: Path, problem: str):
        super().__init__(f"{path}: {problem}; delete {path} to rebuild it")
        self.problem = problem


def save_encoded(encoded: EncodedCorpus, path: str | Path, corpus: CorpusInfo | None = None,
                 text: tuple[Sequence[str], Sequence[str]] | None = None) -> Path:
    """Write an in-memory EncodedCorpus as a cache directory, whole or not at all (io.directory_written_whole: the
    manifest last, then renamed into place); a cache already at ``path`` is replaced. ``text`` (source and target
    lines) is kept beside the ids as source.txt and target.txt, where the text has no file of its own (pairs held out
    of the training files)."""
    path = Path(path)
    with directory_written_whole(path, kind=CACHE_KIND, keep=is_whole_cache) as staging, \
            FileArrays(staging, encoded.src_ids.dtype) as arrays:
        for name in ARRAYS:
            arrays.append(name, getattr(encoded, name))
        arrays.finish()
        write_cache_meta(staging, encoded.tokenizer_fingerprint, encoded.stats, corpus)
        if text is not None:
            for name, lines in zip(("source.txt", "target.txt"), text):
                atomic_write_text(staging / name, "".join(f"{line}\n" for line in lines))
    encoded.path = path
    encoded.corpus_checksum = corpus.checksum if corpus else None
    return path


def is_whole_cache(path: Path) -> bool:
    """Whether the cache at ``path`` loads (another process may have built it meanwhile: then it is kept)."""
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
    arrays = load_arrays(path)
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
        corpus_checksum=meta.get("corpus_checksum"),
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


def load_arrays(path: Path) -> dict[str, np.ndarray]:
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
