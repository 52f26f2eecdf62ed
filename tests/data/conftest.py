"""Shared fixtures for the data-pipeline tests: the real corpora, one trained tokenizer, a local HTTP server."""

from __future__ import annotations

import gzip
import http.server
import itertools
import os
import threading
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
TOKENIZER_SAMPLE = 10_000  # Multi30k train pairs the shared test tokenizer is trained on


def find_data_dir() -> Path:
    env = os.environ.get("VASWANI_DATA")
    return Path(env) if env else REPO_ROOT.parent / "shared" / "data"


@pytest.fixture(autouse=True)
def offline_cache(tmp_path_factory, monkeypatch):
    """No test writes to ~/.cache or reaches the internet: the cache is a temp dir and the mirror is a closed
    port, so an unexpected download fails fast instead of silently using the network."""
    monkeypatch.setenv("VASWANI_CACHE", str(tmp_path_factory.mktemp("vaswani-cache")))
    monkeypatch.setenv("VASWANI_MIRROR", "http://127.0.0.1:9")


@pytest.fixture(scope="session")
def data_dir() -> Path:
    path = find_data_dir()
    if not (path / "multi30k" / "train.de.gz").is_file():
        pytest.skip(f"real corpora not found at {path} (set VASWANI_DATA to the shared data folder)")
    return path


@pytest.fixture(scope="session")
def multi30k_train(data_dir):
    from vaswani.data.corpora import load_corpus

    return load_corpus("multi30k", "train", data_dir=data_dir, download=False)


@pytest.fixture(scope="session")
def tokenizer(multi30k_train):
    """A 4000-token BPE trained once, on the first 10,000 Multi30k train pairs (both sides); shared by all tests."""
    from vaswani.data.tokenizer import Tokenizer

    sample = slice(0, TOKENIZER_SAMPLE)
    texts = itertools.chain(multi30k_train.source[sample], multi30k_train.target[sample])
    return Tokenizer.train(texts, vocab_size=4000)


@pytest.fixture
def write_lines(tmp_path):
    """write_lines(name, lines or bytes) -> path; .gz names are gzip-compressed."""

    def write(name: str, content) -> Path:
        path = tmp_path / name
        data = content if isinstance(content, bytes) else "".join(f"{line}\n" for line in content).encode()
        path.write_bytes(gzip.compress(data) if name.endswith(".gz") else data)
        return path

    return write


class _Handler(http.server.SimpleHTTPRequestHandler):
    """Serves a directory; /truncated/<path> promises the whole file but sends 1000 bytes and hangs up."""

    requests: list[str]

    def do_GET(self):  # noqa: N802 (http.server naming)
        self.server.requests.append(self.path)
        if self.path.startswith("/truncated/"):
            data = (Path(self.directory) / self.path[len("/truncated/") :]).read_bytes()
            self.send_response(200)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data[:1000])
            self.wfile.flush()
            self.close_connection = True
            return
        super().do_GET()

    def log_message(self, *args):  # keep test output clean
        pass


@pytest.fixture
def http_server(data_dir):
    """A real HTTP server on 127.0.0.1 (random free port) serving the shared data dir; yields (url, requests)."""
    handler = lambda *args, **kwargs: _Handler(*args, directory=str(data_dir), **kwargs)  # noqa: E731
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.requests = []
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", server.requests
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
