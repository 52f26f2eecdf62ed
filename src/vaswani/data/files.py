"""The user's own corpus: aligned files on disk, read as a stream of bytes so that its size never sets the memory.

A *split* (training, validation, a named test set) is one or more *parts* read one after the other; a part is two
aligned files (line i of the source file translates line i of the target file) or one TSV file of
``source<TAB>target`` lines. Plain and gzip files are read alike (gzip is recognised by its first bytes).

Three passes read a split, each with memory that does not grow with the corpus:

- ``fingerprints.py``: the sha256 and line count of every file; what keys the caches and what a run records. A
  file that is missing or empty, or two files of a part with different line counts, stop it.
- :func:`scan`: every line decoded and checked (UTF-8, a TSV line's one tab), keeping the text of the pairs asked
  for by index (the tokenizer's sample, the held-out validation pairs).
- :func:`read_chunks` / :func:`decode_chunk`: batches of aligned lines for the encoder, decoded where they are
  encoded (in the worker processes).

A line ends at ``\\n`` only (a ``\\r`` before it is dropped), and a UTF-8 byte-order mark at the start of a file is
not text, as everywhere else in vaswani (``textfiles.py``).
"""

from __future__ import annotations

import gzip
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Iterator, Sequence

import numpy as np

from vaswani.data.languages import LanguagePair, corpus_languages
from vaswani.data.textfiles import GZIP_MAGIC
from vaswani.errors import ConfigError, DataError
from vaswani.progress import ProgressReporter, progress_reporter

READ_BYTES = 1 << 20
# The stream keeps memory flat, but not unbounded: a file (on disk, or once decompressed) past MAX_CORPUS_FILE_BYTES is
# refused before it is read, and a line past MAX_LINE_BYTES is never held whole: it is read in pieces and dropped as
# an empty line, which drops its pair as the length rule drops any pair past max_len (a line that long is far past it).
MAX_CORPUS_FILE_BYTES = 64 << 30
MAX_LINE_BYTES = 1 << 16
BYTE_ORDER_MARK = b"\xef\xbb\xbf"
CHUNK_PAIRS = 20_000  # pairs per batch of lines: a few MB of text, enough to keep the encoder busy


@dataclass(frozen=True)
class FilePart:
    """Two aligned files ``(source, target)``, or one TSV file ``(pairs,)``."""

    paths: tuple[Path, ...]

    @property
    def is_tsv(self) -> bool:
        return len(self.paths) == 1

    @property
    def source(self) -> Path:
        return self.paths[0]

    @property
    def target(self) -> Path:
        return self.paths[-1]

    def describe(self) -> str:
        return str(self.paths[0]) if self.is_tsv else f"{self.paths[0]} + {self.paths[1]}"


@dataclass(frozen=True)
class FileSplit:
    """One split of a corpus as files: its parts, read in order."""

    name: str
    parts: tuple[FilePart, ...]

    def describe(self) -> str:
        return ", ".join(part.describe() for part in self.parts)


def file_part(paths: Sequence[str | Path], setting: str) -> FilePart:
    """A part from one TSV path or two aligned paths; any other number is a ConfigError naming ``setting``."""
    if len(paths) not in (1, 2) or not all(str(p).strip() for p in paths):
        raise ConfigError(f"{setting}: a part is two aligned files (source, target) or one TSV file, got "
                          f"{len(paths)} path(s) {list(map(str, paths))}", field=setting)
    return FilePart(tuple(Path(p) for p in paths))


def progress_bar(total: int, description: str, progress: bool, unit: str = " pairs") -> ProgressReporter:
    """A step of preparing data, reported on stderr (vaswani.progress): a bar on a terminal, lines in a log;
    ``progress=False`` reports nothing."""
    return progress_reporter(total, description, unit, enabled=progress, unit_scale=True, mininterval=1.0,
                             leave=False)


# ------------------------------------------------------------------------------------------------ chunks


@dataclass
class LineChunk:
    """Aligned lines of one part, as bytes: pair ``start + k`` of the split is ``(source[k], target[k])``, found on
    line ``first_line + k`` of the part's file(s)."""

    start: int
    first_line: int
    names: tuple[str, str]  # the files the two sides come from (the same TSV file twice)
    source: list[bytes]
    target: list[bytes]

    def __len__(self) -> int:
        return len(self.source)


def open_lines(path: Path) -> BinaryIO:
    """``path`` opened for reading lines as bytes, decompressed when it is gzip."""
    raw = open(path, "rb")
    if raw.read(2) == GZIP_MAGIC:
        raw.seek(0)
        return gzip.GzipFile(fileobj=raw)  # type: ignore[return-value]
    raw.seek(0)
    return raw


def read_chunks(split: FileSplit, pairs: int = CHUNK_PAIRS) -> Iterator[LineChunk]:
    """The split's pairs as aligned batches of at most ``pairs`` lines, in order. A TSV line with other than one tab
    stops the reading with a DataError naming the file and the line."""
    start = 0
    for part in split.parts:
        names = (str(part.source), str(part.target))
        streams = [open_lines(path) for path in part.paths]
        try:
            first_line = 1
            while True:
                if part.is_tsv:
                    lines = _lines(streams[0], pairs, first_line == 1, part.source)
                    if not lines:
                        break
                    source, target = split_tsv(lines, part.source, first_line)
                else:
                    source = _lines(streams[0], pairs, first_line == 1, part.source)
                    target = _lines(streams[1], pairs, first_line == 1, part.target)
                    if len(source) != len(target):
                        raise DataError(f"{part.source} and {part.target} no longer have the same number of lines "
                                        f"(from line {first_line + min(len(source), len(target))}); were they "
                                        "changed while being read?")
                    if not source:
                        break
                yield LineChunk(start, first_line, names, source, target)
                start += len(source)
                first_line += len(source)
        finally:
            for stream in streams:
                stream.close()


def _lines(stream: BinaryIO, count: int, first: bool, path: Path) -> list[bytes]:
    try:
        lines = _bounded_lines(stream, count)
    except (EOFError, zlib.error, gzip.BadGzipFile) as error:
        raise DataError(f"{path}: corrupt or truncated gzip file ({error})") from None
    if first and lines and lines[0].startswith(BYTE_ORDER_MARK):
        lines[0] = lines[0][len(BYTE_ORDER_MARK):]
    return lines


def _bounded_lines(stream: BinaryIO, count: int) -> list[bytes]:
    """The next ``count`` lines (fewer at the end), without their newline; a line past MAX_LINE_BYTES is read in
    pieces of at most that size and comes back empty, so it takes one line's place and no more memory."""
    read, piece_bytes = stream.readline, MAX_LINE_BYTES + 1
    lines: list[bytes] = []
    inside_long_line = False
    while len(lines) < count:
        pieces = [read(piece_bytes) for _ in range(count - len(lines))]  # a C-level call a line: the common case
        for piece in pieces:
            if not piece:  # the end of the file
                if inside_long_line:
                    lines.append(b"")
                return lines
            line_ends = piece[-1:] == b"\n" or len(piece) < piece_bytes  # the last line may have no newline
            if inside_long_line or not line_ends:
                inside_long_line = not line_ends
                if line_ends:
                    lines.append(b"")  # the long line ends here: it is dropped, its place kept
                continue
            lines.append(piece[:-1] if piece[-1:] == b"\n" else piece)
    return lines


def split_tsv(lines: list[bytes], path: Path, first_line: int) -> tuple[list[bytes], list[bytes]]:
    """The two fields of each ``source<TAB>target`` line; a line with other than one tab is a DataError."""
    fields = [line.split(b"\t") for line in lines]
    for offset, row in enumerate(fields):
        if len(row) != 2:
            raise DataError(f"{path}:{first_line + offset}: expected 2 tab-separated fields (source<TAB>target), "
                            f"found {len(row)}")
    return [row[0] for row in fields], [row[1] for row in fields]


def decode_chunk(chunk: LineChunk) -> tuple[list[str], list[str]]:
    """Both sides of a chunk as text; a byte that is not UTF-8 is a DataError naming the file and the line."""
    return (decode_lines(chunk.source, chunk.names[0], chunk.first_line),
            decode_lines(chunk.target, chunk.names[1], chunk.first_line))


def decode_lines(lines: list[bytes], name: str, first_line: int) -> list[str]:
    data = b"\n".join(lines)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        line = first_line + data.count(b"\n", 0, error.start)
        bad = data[error.start : error.end].hex(" ")
        raise DataError(f"{name}:{line}: invalid UTF-8 (byte(s) {bad}); the text must be UTF-8 encoded") from None
    decoded = text.split("\n")
    if "\r" in text:
        decoded = [line[:-1] if line.endswith("\r") else line for line in decoded]
    return decoded


# -------------------------------------------------------------------------------------------------- scan


@dataclass
class Scanned:
    """What :func:`scan` kept: the text of the pairs at ``indices`` (sorted), and how many of the watched pairs
    occur in the split."""

    indices: np.ndarray
    source: list[str]
    target: list[str]
    watched_found: int = 0

    def text(self, indices: np.ndarray) -> tuple[list[str], list[str]]:
        """The text of the pairs at ``indices``, which must be among the kept ones."""
        rows = np.searchsorted(self.indices, indices)
        return [self.source[row] for row in rows], [self.target[row] for row in rows]


def scan(split: FileSplit, pairs: int, keep: np.ndarray, progress: bool = False,
         watch: set[tuple[str, str]] | None = None) -> Scanned:
    """Decode and check every line of ``split`` (``pairs`` in all); keep the text of the pairs at the sorted indices
    ``keep``, and count how many of the ``watch`` pairs occur in it. A bad line is a DataError, so nothing is kept
    from a bad corpus."""
    source: list[str] = []
    target: list[str] = []
    found: set[tuple[str, str]] = set()
    with progress_bar(pairs, f"checking {split.name}", progress) as bar:
        for chunk in read_chunks(split):
            src, tgt = decode_chunk(chunk)
            lo, hi = np.searchsorted(keep, [chunk.start, chunk.start + len(chunk)])
            for index in (keep[lo:hi] - chunk.start).tolist():
                source.append(src[index])
                target.append(tgt[index])
            if watch:
                found |= watch.intersection(zip(src, tgt))
            bar.update(len(chunk))
    return Scanned(keep, source, target, len(found))


# ------------------------------------------------------------------------------------------------ corpus

DEFAULT_HOLDOUT = 1000  # validation pairs held out of the training files when no validation files are given
TRAIN, VALID = "train", "valid"


@dataclass(frozen=True)
class FileCorpus:
    """A whole corpus of the user's files: training pairs, validation pairs (files, or ``holdout`` pairs held out
    of the training files), and any number of named test sets."""

    languages: LanguagePair
    train: FileSplit
    valid: FileSplit | None = None
    tests: tuple[FileSplit, ...] = ()
    holdout: int = DEFAULT_HOLDOUT
    name: str = "local"  # what its caches and prepared data are named by: "local", or a registered dataset's name

    def __post_init__(self) -> None:
        names = [split.name for split in self.tests]
        for name in names:
            taken = (TRAIN, self.valid.name if self.valid else VALID)
            if name in taken or names.count(name) > 1 or not name.strip():
                raise ConfigError(f"test set name {name!r} is taken: name each test set once, and neither "
                                  f"{taken[0]!r} nor {taken[1]!r}", field="data.test_files")

    def splits(self) -> list[FileSplit]:
        return [self.train, *([self.valid] if self.valid else []), *self.tests]


def local_corpus(
    train: Sequence[Sequence[str | Path]],
    valid: Sequence[str | Path] = (),
    tests: dict[str, Sequence[str | Path]] | None = None,
    src_lang: str | None = None,
    tgt_lang: str | None = None,
    holdout: int | None = None,
) -> FileCorpus:
    """A FileCorpus from lists of files: the training parts (each ``(source, target)`` or ``(pairs.tsv,)``), the
    validation part (none: pairs held out of the training files) and the test sets by name. The languages are
    ``src_lang``/``tgt_lang``, or else the suffixes of the first two aligned files."""
    parts = tuple(file_part(part, "training files") for part in train)
    if not parts:
        raise ConfigError("a local corpus needs a source file and a target file (--src/--tgt) or a TSV file (--tsv)")
    test_splits = tuple(FileSplit(name, (file_part(paths, f"test set {name}"),)) for name, paths in
                        (tests or {}).items())
    aligned = next((part.paths for split in (parts, *(t.parts for t in test_splits)) for part in split
                    if not part.is_tsv), ())
    return FileCorpus(corpus_languages(aligned, src_lang, tgt_lang), FileSplit(TRAIN, parts),
                      FileSplit(VALID, (file_part(valid, "validation files"),)) if valid else None, test_splits,
                      holdout if holdout is not None else FileCorpus.holdout)


def held_out_count(holdout: int, pairs: int) -> int:
    """How many of ``pairs`` training pairs are held out for validation: ``holdout``, but at most a tenth of them, so
    that a small corpus keeps most of its pairs for training."""
    return min(holdout, pairs // 10)
