"""What a split of the user's files holds, without its text: each file's sha256 (of its bytes on disk) and line
count, read once in a stream. It keys the caches of prepared data and is what a run records of its corpus
(corpus.json), so that a changed file is refused by name."""

from __future__ import annotations

import gzip
import hashlib
import io
import zlib
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from vaswani.data.files import MAX_CORPUS_FILE_BYTES, READ_BYTES, FileSplit, progress_bar
from vaswani.data.textfiles import GZIP_MAGIC
from vaswani.errors import DataError


@dataclass
class FileRecord:
    """One file as it was read: where, how many lines, and the sha256 of its bytes on disk."""

    path: str
    lines: int
    sha256: str


@dataclass
class SplitFingerprint:
    """What a split's files hold, without their text: each file's record, the pairs, one checksum for all."""

    split: str
    files: list[FileRecord]
    pairs: int
    checksum: str


def fingerprint(split: FileSplit, progress: bool = False) -> SplitFingerprint:
    """Read every file of ``split`` once: its sha256 (of the bytes on disk) and its line count. Refuses a missing or
    empty file and a part whose two files have different line counts, naming both files and both counts."""
    total = sum(_size(path) for part in split.parts for path in part.paths)
    records: list[FileRecord] = []
    digest = hashlib.sha256()
    pairs = 0
    with progress_bar(total, f"reading {split.name}", progress, unit="B") as bar, \
            ThreadPoolExecutor(2) as threads:  # sha256 lets go of the GIL: the two sides are hashed at once
        for part in split.parts:
            counted = list(threads.map(lambda path: _count_lines(path, bar), part.paths))
            records += counted
            # which files pair up, and in what order, is part of what the corpus is
            digest.update(("tsv:" if part.is_tsv else "pair:").encode()
                          + ",".join(record.sha256 for record in counted).encode() + b"\n")
            if not part.is_tsv and counted[0].lines != counted[1].lines:
                raise DataError(f"{part.source} has {counted[0].lines:,} lines but {part.target} has "
                                f"{counted[1].lines:,}; a parallel corpus needs the same number of lines on both "
                                "sides (line i of one translates line i of the other)")
            pairs += counted[0].lines
    return SplitFingerprint(split.name, records, pairs, digest.hexdigest())


def _size(path: Path) -> int:
    if not path.exists():
        raise DataError(f"{path}: file not found")
    if path.is_dir():
        raise DataError(f"{path}: is a directory, expected a text file")
    if not path.is_file():  # a device or a pipe: it may never end, and it cannot be read twice
        raise DataError(f"{path}: is not a regular file (a device, say); give a text file")
    size = path.stat().st_size
    if size > MAX_CORPUS_FILE_BYTES:
        raise DataError(f"{path}: {size:,} bytes, more than the {MAX_CORPUS_FILE_BYTES:,} vaswani reads from one "
                        "corpus file; split it into several files (data.train_files takes a list of parts)")
    return size


def _count_lines(path: Path, bar) -> FileRecord:
    """sha256 of the file's bytes and its number of lines (of the decompressed text, for gzip), in one read."""
    digest = hashlib.sha256()
    try:
        with open(path, "rb") as raw:
            head = raw.read(2)
            raw.seek(0)
            if head == GZIP_MAGIC:
                hashed = _HashingReader(raw, digest, bar)
                lines, has_text = _count(gzip.GzipFile(fileobj=hashed), path)
                hashed.drain()
            else:
                lines, has_text = _count(_HashingReader(raw, digest, bar), path)
    except OSError as error:
        raise DataError(f"{path}: cannot read file: {error.strerror or error}") from None
    if not has_text:
        raise DataError(f"{path}: file is empty (no non-blank lines)")
    return FileRecord(str(path), lines, digest.hexdigest())


def _count(stream: BinaryIO, path: Path) -> tuple[int, bool]:
    lines, has_text, last, total = 0, False, b"\n", 0
    try:
        while chunk := stream.read(READ_BYTES):
            total += len(chunk)
            if total > MAX_CORPUS_FILE_BYTES:  # a gzip file's text may be far larger than the file
                raise DataError(f"{path}: more than the {MAX_CORPUS_FILE_BYTES:,} bytes vaswani reads from one "
                                "corpus file; split it into several files (data.train_files takes a list of parts)")
            lines += chunk.count(b"\n")
            has_text = has_text or bool(chunk.strip())
            last = chunk[-1:]
    except (EOFError, zlib.error, gzip.BadGzipFile) as error:
        raise DataError(f"{path}: corrupt or truncated gzip file ({error})") from None
    return lines + (last != b"\n"), has_text


class _HashingReader(io.RawIOBase):
    """A file read through: every byte read is hashed and counted on the progress bar."""

    def __init__(self, raw: BinaryIO, digest, bar) -> None:
        self.raw, self.digest, self.bar = raw, digest, bar

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        n = self.raw.readinto(buffer)
        if n:
            self.digest.update(memoryview(buffer)[:n])
            self.bar.update(n)
        return n or 0

    def read(self, size: int = -1) -> bytes:
        data = self.raw.read(size)
        self.digest.update(data)
        self.bar.update(len(data))
        return data

    def drain(self) -> None:
        """Hash what a reader that stopped early (gzip's trailing bytes) left unread."""
        while self.read(READ_BYTES):
            pass


__all__ = ["FileRecord", "SplitFingerprint", "fingerprint"]
