"""Finding a corpus file locally, or downloading it once into a cache, verified by sha256.

Resolution order for a file that a dataset needs (its path relative to a data dir, e.g. ``multi30k/val.de.gz``):

1. the data dir (``--data-dir`` / ``data_dir=``, else env ``VASWANI_DATA``), if the file is there;
2. the cache dir (``cache_dir=``, else env ``VASWANI_CACHE``, else ``~/.cache/vaswani``), same layout;
3. a download into the cache dir, from the mirror (``mirror=`` / env ``VASWANI_MIRROR``: a base URL laid out
   like a data dir) or else from the file's public URL.

A download streams into a temporary file next to the destination and checks the byte count and sha256 before
:func:`vaswani.io.atomic_write` renames it into place, so a valid-looking file at the destination is always complete
and verified.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
from dataclasses import dataclass
from pathlib import Path

from vaswani.errors import DataError
from vaswani.io import absolute_path, atomic_write, default_cache_dir

logger = logging.getLogger(__name__)

CHUNK_SIZE = 1 << 16


@dataclass(frozen=True)
class RemoteFile:
    """One file of a dataset: where it lives in a data dir, its public URL and its sha256."""

    path: str  # relative to a data dir, with "/" separators
    url: str
    sha256: str



def default_data_dir() -> Path | None:
    value = os.environ.get("VASWANI_DATA")
    return absolute_path(value) if value else None


def default_mirror() -> str | None:
    return os.environ.get("VASWANI_MIRROR") or None


def url_for(file: RemoteFile, mirror: str | None = None) -> str:
    mirror = mirror if mirror is not None else default_mirror()
    if mirror and not re.match(r"(https?|file)://", mirror):
        raise DataError(f"mirror {mirror!r} is not a URL: VASWANI_MIRROR must be a base URL starting with http://, "
                        "https:// or file://")
    return f"{mirror.rstrip('/')}/{file.path}" if mirror else file.url


def resolve_file(
    file: RemoteFile,
    data_dir: str | Path | None = None,
    cache_dir: str | Path | None = None,
    mirror: str | None = None,
    download: bool = True,
) -> Path:
    """Return a local path holding ``file``: data dir, then cache, then a verified download into the cache."""
    data_dir = Path(data_dir).expanduser() if data_dir is not None else default_data_dir()
    cache_dir = Path(cache_dir).expanduser() if cache_dir is not None else default_cache_dir()
    if data_dir is not None and (data_dir / file.path).is_file():
        return data_dir / file.path
    cached = cache_dir / file.path
    if cached.is_file():
        return cached
    where = f"data dir {data_dir} or cache {cache_dir}" if data_dir is not None else f"cache {cache_dir}"
    if not download:
        raise DataError(f"{file.path}: not found in {where} (downloads are disabled)")
    url = url_for(file, mirror)
    logger.info("downloading %s -> %s", url, cached)
    try:
        download_file(url, cached, file.sha256)
    except DataError as error:
        raise DataError(f"{file.path}: not found in {where}, and {error}") from None
    return cached


def download_file(url: str, dest: str | Path, sha256: str, timeout: float = 60.0) -> Path:
    """Download ``url`` to ``dest`` atomically; DataError (naming the URL) on any failure, leaving no file."""
    dest = Path(dest)
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise DataError(f"cannot create cache directory {dest.parent}: {error.strerror or error}") from None

    def write(tmp: str) -> None:
        with open(tmp, "wb") as out:
            digest, n_bytes, expected_bytes = _stream(url, out, timeout)
        if expected_bytes is not None and n_bytes != expected_bytes:
            raise DataError(f"download of {url} is incomplete: got {n_bytes} of {expected_bytes} bytes")
        if digest != sha256:
            raise DataError(
                f"download of {url} has sha256 {digest}, expected {sha256} (wrong or corrupted file on the server)"
            )

    atomic_write(dest, write)  # a failed download leaves no file: only a verified one is renamed into place
    return dest


def _stream(url: str, out, timeout: float) -> tuple[str, int, int | None]:
    """Copy the response body into ``out``; returns (sha256, bytes written, Content-Length or None)."""
    # Imported here: every command imports this module (vaswani/__init__.py), few of them download.
    import http.client
    import urllib.error
    import urllib.request

    digest = hashlib.sha256()
    n_bytes = 0
    expected: int | None = None
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            length = response.headers.get("Content-Length")
            expected = int(length) if length and length.isdigit() else None
            while chunk := response.read(CHUNK_SIZE):
                out.write(chunk)
                digest.update(chunk)
                n_bytes += len(chunk)
    except urllib.error.HTTPError as error:
        raise DataError(f"download of {url} failed: HTTP {error.code} {error.reason}") from None
    except urllib.error.URLError as error:
        raise DataError(f"download of {url} failed: {error.reason}") from None
    except http.client.IncompleteRead as error:
        of = f" of {expected}" if expected is not None else ""
        raise DataError(
            f"download of {url} failed: the connection closed after {n_bytes + len(error.partial)}{of} bytes"
        ) from None
    except (http.client.HTTPException, OSError) as error:
        raise DataError(f"download of {url} failed after {n_bytes} bytes: {error}") from None
    return digest.hexdigest(), n_bytes, expected
