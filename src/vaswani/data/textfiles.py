"""Reading one-sentence-per-line text files (plain or gzip) strictly, with errors that name the file and line.

Everything is read as bytes first: that gives the sha256 of exactly what is on disk (the corpus checksum)
and lets a UTF-8 error be turned into a line number instead of a traceback. Only regular files and pipes are read
(a device such as /dev/zero never ends), and none past :data:`MAX_TEXT_BYTES`: a regular file's size is checked
before it is read, a pipe or standard input stops at the limit. A gzip file is decompressed as a stream, a chunk at
a time, under the same limit: a few kilobytes of gzip can hold gigabytes of text, and nothing should learn that by
running out of memory.
"""

from __future__ import annotations

import gzip
import io
import os
import stat
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, TextIO

from vaswani.errors import DataError
from vaswani.io import bytes_sha256

GZIP_MAGIC = b"\x1f\x8b"
# The most text one file (or one gzip file, decompressed) may hold: far past any corpus a CPU trains on (WMT14 en-de
# is 1.3 GB for both sides), and well inside the memory of a machine that holds that much text as Python strings.
MAX_TEXT_BYTES = 2 << 30
GZIP_CHUNK = 1 << 20
STANDARD_INPUT = "standard input"  # how messages name stdin where they would name a file


@dataclass
class TextFile:
    """The lines of one file and the sha256 of its bytes on disk (compressed bytes for .gz files)."""

    path: Path
    lines: list[str]
    sha256: str


def read_bytes(path: str | Path, limit: int | None = None) -> bytes:
    """The bytes of a regular file or a pipe, at most ``limit`` (default :data:`MAX_TEXT_BYTES`); anything else (a
    directory, a device) or more is a DataError naming ``path``, raised before the bytes are in memory."""
    path = Path(path)
    limit = MAX_TEXT_BYTES if limit is None else limit
    if not path.exists():
        raise DataError(f"{path}: file not found")
    if path.is_dir():
        raise DataError(f"{path}: is a directory, expected a text file")
    try:
        with open(path, "rb") as handle:
            return read_bounded(handle, path, limit)
    except OSError as error:
        raise DataError(f"{path}: cannot read file: {error.strerror or error}") from None


def read_bounded(handle: BinaryIO, name: str | Path, limit: int) -> bytes:
    """What ``handle`` holds, if it is a regular file or a pipe of at most ``limit`` bytes (a terminal counts as a
    pipe); a DataError naming ``name`` otherwise."""
    info = os.fstat(handle.fileno())
    if not (stat.S_ISREG(info.st_mode) or stat.S_ISFIFO(info.st_mode) or stat.S_ISSOCK(info.st_mode)
            or os.isatty(handle.fileno())):
        raise DataError(f"{name}: is not a regular file or a pipe (a device, say); give a text file")
    if stat.S_ISREG(info.st_mode) and info.st_size > limit:
        raise DataError(f"{name}: {info.st_size:,} bytes, more than the {limit:,} vaswani reads from one text file; "
                        "split it")
    chunks, total = [], 0
    while chunk := handle.read(min(GZIP_CHUNK, limit + 1 - total)):
        chunks.append(chunk)
        total += len(chunk)
        if total > limit:
            raise DataError(f"{name}: more than the {limit:,} bytes vaswani reads from one text file; split it")
    return b"".join(chunks)


def gunzip(data: bytes, name: str | Path, limit: int | None = None) -> bytearray:
    """The decompressed bytes of gzip ``data``, read a chunk at a time; more than ``limit`` bytes (default
    :data:`MAX_TEXT_BYTES`) stop the reading with a DataError naming ``name``, before they are all in memory."""
    limit = MAX_TEXT_BYTES if limit is None else limit
    out = bytearray()
    try:
        with gzip.GzipFile(fileobj=io.BytesIO(data)) as stream:
            while chunk := stream.read(GZIP_CHUNK):
                out += chunk
                if len(out) > limit:
                    raise DataError(f"{name}: decompresses to more than {limit:,} bytes, the most vaswani reads from "
                                    "one gzip file; decompress it yourself and give the plain file if it really "
                                    "holds that much text")
    except (OSError, EOFError, zlib.error) as error:
        raise DataError(f"{name}: corrupt or truncated gzip file ({error})") from None
    return out


def decode_text(data: bytes, name: str | Path) -> str:
    """Decompress (if gzip, see :func:`gunzip`) and decode UTF-8; a bad byte becomes 'name:line: invalid UTF-8'.
    ``name`` is the file's path, or STANDARD_INPUT."""
    if data[:2] == GZIP_MAGIC:
        data = gunzip(data, name)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        line = data.count(b"\n", 0, error.start) + 1
        raise DataError(f"{name}:{line}: {_invalid_utf8(data[error.start : error.end])}") from None
    # A UTF-8 byte-order mark would otherwise become part of the first sentence.
    return text[1:] if text.startswith("\ufeff") else text


def _invalid_utf8(bad: bytes) -> str:
    return f"invalid UTF-8 (byte(s) {bad.hex(' ')}); the text must be UTF-8 encoded"


def unicode_problem(text: str, from_bytes: bool = False) -> str | None:
    """Why ``text`` is not Unicode text (the tokenizer would refuse it with a TypeError), or None if it is.

    Such a string holds lone surrogates. JSON makes them from escapes such as "\\ud800"; Python makes them from
    bytes that are not UTF-8 in argv and on a terminal's stdin ('surrogateescape': byte 0xE4 becomes U+DCE4), and
    for such text (``from_bytes``) the message names those bytes, as a file's would.
    """
    try:
        text.encode("utf-8")
        return None
    except UnicodeEncodeError as error:
        start, bad = error.start, text[error.start : error.end]
    if from_bytes:
        try:
            return _invalid_utf8(bad.encode("utf-8", "surrogateescape"))
        except UnicodeEncodeError:  # a surrogate that no byte was turned into
            pass
    surrogate = ascii(bad[0])[1:-1]  # written as \ud800: the character itself cannot be printed
    return f"lone surrogate {surrogate} at character {start + 1} is not a Unicode character; send Unicode text"


def check_unicode_text(text: str, name: str) -> str:
    """``text`` (from argv or a terminal) unchanged, or a DataError '``name``: invalid UTF-8 (byte(s) ..)' when it
    holds bytes that were not UTF-8 (see unicode_problem). ``name`` is where it came from, e.g. ``--text``."""
    problem = unicode_problem(text, from_bytes=True)
    if problem is not None:
        raise DataError(f"{name}: {problem}")
    return text


def split_lines(text: str) -> list[str]:
    # str.splitlines() would also split on \x0b, \x1c, \u2028, ... which occur inside real sentences and would
    # silently misalign the two sides of a parallel corpus. Only \n (and a \r before it) ends a line.
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()  # the final newline ends the last line; it does not start a new one
    return [line[:-1] if line.endswith("\r") else line for line in lines]


def decode_lines(data: bytes, name: str | Path) -> list[str]:
    """The lines of plain or gzip UTF-8 bytes, read the one way every command reads text: a byte-order mark
    dropped, only \\n (or \\r\\n) ending a line, a bad byte reported as 'name:line: invalid UTF-8'."""
    return split_lines(decode_text(data, name))


def read_lines(path: str | Path) -> list[str]:
    """The lines of a plain or .gz UTF-8 file (see decode_lines); unlike read_text_file, an empty file is no
    error and no checksum is taken."""
    return decode_lines(read_bytes(path), path)


def read_stream_lines(stream: TextIO, name: str = STANDARD_INPUT) -> list[str]:
    """The lines of a text stream such as sys.stdin, read as bytes and decoded like a file (see decode_lines)."""
    buffer = getattr(stream, "buffer", None)
    if buffer is not None and _has_descriptor(buffer):
        data = read_bounded(buffer, name, MAX_TEXT_BYTES)
    else:  # a stream without a file underneath (an io.StringIO standing in for stdin): the bytes Python decoded
        source = buffer if buffer is not None else stream
        text = source.read(MAX_TEXT_BYTES + 1)
        data = text if isinstance(text, bytes) else text.encode("utf-8", "surrogateescape")
        if len(data) > MAX_TEXT_BYTES:
            raise DataError(f"{name}: more than the {MAX_TEXT_BYTES:,} bytes vaswani reads from one text file")
    return decode_lines(data, name)


def _has_descriptor(stream: BinaryIO) -> bool:
    try:
        stream.fileno()
    except (OSError, ValueError, AttributeError):  # io.UnsupportedOperation is an OSError
        return False
    return True


def read_text_file(path: str | Path, expected_sha256: str | None = None) -> TextFile:
    """Read a plain or .gz UTF-8 file with one sentence per line.

    Raises DataError for a missing, unreadable or empty file, invalid UTF-8 (with the line number), a corrupt
    gzip stream, or bytes that do not match ``expected_sha256``.
    """
    path = Path(path)
    data = read_bytes(path)
    checksum = bytes_sha256(data)
    if expected_sha256 is not None and checksum != expected_sha256:
        raise DataError(
            f"{path}: sha256 is {checksum} but {expected_sha256} was expected; the file is corrupt or a "
            "different version. Delete it so that it is downloaded again, or use your own files instead (prepare: "
            "--src/--tgt, evaluate: --src/--ref)"
        )
    lines = decode_lines(data, path)
    if not lines or all(not line.strip() for line in lines):
        raise DataError(f"{path}: file is empty (no non-blank lines)")
    return TextFile(path=path, lines=lines, sha256=checksum)


def read_tsv_file(path: str | Path) -> tuple[list[str], list[str], str]:
    """Read ``source<TAB>target`` lines; returns (sources, targets, sha256 of the file)."""
    file = read_text_file(path)
    sources, targets = [], []
    for number, line in enumerate(file.lines, start=1):
        fields = line.split("\t")
        if len(fields) != 2:
            raise DataError(
                f"{file.path}:{number}: expected 2 tab-separated fields (source<TAB>target), found {len(fields)}"
            )
        sources.append(fields[0])
        targets.append(fields[1])
    return sources, targets, file.sha256
