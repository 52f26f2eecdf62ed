"""Fixtures of the server tests: a served tiny checkpoint, in process (TestClient) or as a real subprocess."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("fastapi", reason="the serve extra is not installed: pip install -e '.[serve]'")
pytest.importorskip("uvicorn", reason="the serve extra is not installed: pip install -e '.[serve]'")
pytest.importorskip("httpx", reason="httpx (dev extra) is needed to talk to the server")

import httpx  # noqa: E402

SRC = Path(__file__).resolve().parents[2] / "src"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def port() -> int:
    """A loopback port nothing listens on."""
    return free_port()


class ServerProcess:
    """`vaswani serve` in a subprocess on a free loopback port, ready once /health answers."""

    def __init__(self, checkpoint: Path, *flags: str):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        env = {**os.environ, "PYTHONPATH": f"{SRC}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
        # The server's output (an access-log line per request) goes to a file: a pipe nobody reads fills after a few
        # thousand requests, and the server then blocks writing its log.
        self.log = tempfile.TemporaryFile(mode="w+")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "vaswani.cli", "serve", "--checkpoint", str(checkpoint), "--port", str(self.port),
             "--threads", "1", *flags],
            env=env, stdout=self.log, stderr=subprocess.STDOUT, text=True,
        )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"server exited at start-up:\n{self.output()}")
            try:
                if httpx.get(f"{self.url}/health", timeout=1).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.2)
        self.stop()
        raise RuntimeError("server did not become ready in 60 s")

    def stop(self) -> str:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        return self.output()

    def output(self) -> str:
        """What the server printed so far."""
        self.log.seek(0)
        return self.log.read()


@pytest.fixture(scope="session")
def start_server() -> type[ServerProcess]:
    """ServerProcess itself, for tests that start a server of their own (checkpoint, flags)."""
    return ServerProcess


@pytest.fixture(scope="module")
def server(tiny_checkpoint) -> Iterator[ServerProcess]:
    process = ServerProcess(tiny_checkpoint)
    yield process
    process.stop()

