"""Downloads against a real HTTP server on 127.0.0.1: verified, cached, atomic, and clean on failure."""

from __future__ import annotations

import pytest

from vaswani.data.corpora import load_corpus
from vaswani.data.download import RemoteFile, download_file, resolve_file
from vaswani.data.registry import get_dataset
from vaswani.errors import DataError
from vaswani.io import file_sha256

VAL_DE = get_dataset("multi30k").splits["val"].parts[0][0]  # multi30k/val.de.gz


def leftovers(folder) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file())


def test_download_verifies_then_cache_is_used_without_requests(http_server, tmp_path):
    url, requests = http_server
    empty_data_dir, cache = tmp_path / "data", tmp_path / "cache"
    empty_data_dir.mkdir()
    corpus = load_corpus("multi30k", "val", data_dir=empty_data_dir, cache_dir=cache, mirror=url)
    assert len(corpus) == 1014
    assert sorted(requests) == ["/multi30k/val.de.gz", "/multi30k/val.en.gz"]
    assert leftovers(cache) == ["multi30k/val.de.gz", "multi30k/val.en.gz"]  # no temp files
    assert file_sha256(cache / "multi30k/val.de.gz") == VAL_DE.sha256

    again = load_corpus("multi30k", "val", data_dir=empty_data_dir, cache_dir=cache, mirror=url)
    assert len(requests) == 2, "second call must come from the cache"
    assert again.checksum == corpus.checksum


def test_data_dir_comes_before_cache_and_network(http_server, data_dir, tmp_path):
    url, requests = http_server
    path = resolve_file(VAL_DE, data_dir=data_dir, cache_dir=tmp_path / "cache", mirror=url)
    assert path == data_dir / VAL_DE.path and requests == []


def test_checksum_mismatch_leaves_no_file(http_server, tmp_path):
    url, _ = http_server
    wrong = RemoteFile(VAL_DE.path, VAL_DE.url, "0" * 64)
    cache = tmp_path / "cache"
    with pytest.raises(DataError) as error:
        resolve_file(wrong, data_dir=tmp_path / "nothing", cache_dir=cache, mirror=url)
    message = str(error.value)
    assert f"{url}/multi30k/val.de.gz" in message and "sha256" in message and "expected " + "0" * 64 in message
    assert leftovers(cache) == []


def test_connection_dying_mid_file_leaves_no_partial_file(http_server, tmp_path):
    url, requests = http_server
    dest = tmp_path / "cache" / "val.de.gz"
    with pytest.raises(DataError, match=r"truncated/multi30k/val.de.gz.*(incomplete|closed).*1000 .*24681"):
        download_file(f"{url}/truncated/multi30k/val.de.gz", dest, VAL_DE.sha256)
    assert requests == ["/truncated/multi30k/val.de.gz"]
    assert leftovers(dest.parent) == []


def test_missing_file_on_server_names_url(http_server, tmp_path):
    url, _ = http_server
    with pytest.raises(DataError, match=r"not found in .*/nowhere/x.de.*HTTP 404"):
        resolve_file(RemoteFile("nowhere/x.de", "unused", "0" * 64), cache_dir=tmp_path, mirror=url)
    assert leftovers(tmp_path) == []


def test_unreachable_server_is_a_data_error(tmp_path):
    # The autouse fixture points VASWANI_MIRROR at a closed port.
    with pytest.raises(DataError, match=r"download of http://127.0.0.1:9/multi30k/val.de.gz failed"):
        resolve_file(VAL_DE, data_dir=tmp_path / "none", cache_dir=tmp_path / "cache")


def test_a_mirror_that_is_not_a_url_is_named(tmp_path, monkeypatch):
    monkeypatch.setenv("VASWANI_MIRROR", "notaurl")  # was urllib's ValueError: unknown url type
    with pytest.raises(DataError, match=r"mirror 'notaurl' is not a URL: VASWANI_MIRROR must be a base URL"):
        resolve_file(VAL_DE, data_dir=tmp_path / "none", cache_dir=tmp_path / "cache")
    assert leftovers(tmp_path / "cache") == []
