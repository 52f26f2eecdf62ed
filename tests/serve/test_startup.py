"""`vaswani serve` start-up: every problem is one line and an exit status, never a failed start-up inside uvicorn;
the address is claimed before the model loads, and a checkpoint problem reads as `translate` reports it."""

from __future__ import annotations

import shutil
import socket
from pathlib import Path

import pytest
import torch
import uvicorn

import vaswani.serve.app as serve_app
from vaswani.cli import main
from vaswani.errors import VaswaniError
from vaswani.tools.serve_load import Server, startup_error


@pytest.fixture(autouse=True)
def _never_serve(monkeypatch) -> None:
    """A start-up that must fail never reaches uvicorn (which would serve until killed)."""

    def serve(self, sockets=None) -> None:  # noqa: ANN001 - uvicorn.Server.run's signature
        raise AssertionError("the server started")

    monkeypatch.setattr(uvicorn.Server, "run", serve)


@pytest.fixture
def model_never_loads(monkeypatch) -> None:
    monkeypatch.setattr(serve_app, "load_served_model", lambda *args: pytest.fail("the model was loaded"))


def serve(capsys, *argv: str) -> tuple[int, str]:
    code = main(["serve", *argv])
    return code, capsys.readouterr().err


def test_a_port_in_use_is_refused_before_the_model_loads(tiny_checkpoint, model_never_loads, capsys) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        code, err = serve(capsys, "--checkpoint", str(tiny_checkpoint), "--port", str(port))
    assert (code, err) == (1, f"vaswani serve: error: --port {port}: 127.0.0.1:{port} is already in use; stop what "
                              "listens there or choose another --port\n")


def test_a_host_that_does_not_resolve_is_refused_before_the_model_loads(tiny_checkpoint, model_never_loads,
                                                                          monkeypatch, capsys) -> None:
    def unknown(host, *args):  # noqa: ANN001, ANN002 - socket.getaddrinfo's; no name server is asked
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

    monkeypatch.setattr(socket, "getaddrinfo", unknown)
    code, err = serve(capsys, "--checkpoint", str(tiny_checkpoint), "--host", "nosuchhost.invalid")
    assert (code, err) == (2, "vaswani serve: error: --host nosuchhost.invalid: cannot be resolved (Name or service "
                              "not known); give an address of this machine, e.g. 127.0.0.1 (this machine only) or "
                              "0.0.0.0 (every interface)\n")


@pytest.mark.parametrize("value, problem", [
    ("inf", "serve.batch_wait_ms=inf must be a finite number"),
    ("nan", "serve.batch_wait_ms=nan must be a finite number"),
    ("5000", "serve.batch_wait_ms=5000.0 must be >= 0 and <= 1000"),
])
def test_a_batch_wait_that_would_hang_every_request_is_refused(tiny_checkpoint, model_never_loads, capsys,
                                                               value: str, problem: str) -> None:
    code, err = serve(capsys, "--checkpoint", str(tiny_checkpoint), "--batch-wait-ms", value)
    shown = "5000.0" if value == "5000" else value
    assert (code, err) == (2, f"vaswani serve: error: --batch-wait-ms {shown}: {problem}\n")


def _truncated_weights(checkpoint: Path) -> None:
    weights = checkpoint / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:1000])


def _garbage_search(checkpoint: Path) -> None:
    (checkpoint / "search.json").write_text("garbage{", encoding="utf-8")


BROKEN = {"truncated model.safetensors": _truncated_weights, "garbage search.json": _garbage_search}


@pytest.mark.parametrize("damage", list(BROKEN), ids=list(BROKEN))
def test_a_checkpoint_that_cannot_load_gives_translates_one_line_error(tiny_checkpoint, tmp_path, port, capsys,
                                                                       damage: str) -> None:
    checkpoint = tmp_path / "checkpoint"
    shutil.copytree(tiny_checkpoint, checkpoint)
    BROKEN[damage](checkpoint)
    (tmp_path / "in.txt").write_text("Ein Mann fährt Fahrrad.\n", encoding="utf-8")
    translate_code = main(["translate", "--checkpoint", str(checkpoint), "--input", str(tmp_path / "in.txt"),
                           "--device", "cpu"])
    translated = capsys.readouterr().err
    code, err = serve(capsys, "--checkpoint", str(checkpoint), "--device", "cpu", "--port", str(port))
    assert translated.startswith("vaswani translate: error: ") and translated.count("\n") == 1
    assert (code, err) == (translate_code, translated.replace("vaswani translate:", "vaswani serve:")) == (2, err)
    assert str(checkpoint) in err


@pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA device is visible")
def test_serving_on_a_missing_cuda_device_is_translates_one_line_error(tiny_checkpoint, tmp_path, port,
                                                                       capsys) -> None:
    (tmp_path / "in.txt").write_text("Ein Mann fährt Fahrrad.\n", encoding="utf-8")
    translate_code = main(["translate", "--checkpoint", str(tiny_checkpoint), "--input", str(tmp_path / "in.txt"),
                           "--device", "cuda"])
    translated = capsys.readouterr().err
    code, err = serve(capsys, "--checkpoint", str(tiny_checkpoint), "--device", "cuda", "--port", str(port))
    assert (code, err) == (translate_code, translated.replace("vaswani translate:", "vaswani serve:")) == (1, err)
    assert err.startswith("vaswani serve: error: device 'cuda' was asked for but no CUDA device is visible")
    assert err.count("\n") == 1


def test_serve_bench_names_the_servers_one_line_error() -> None:
    assert startup_error("INFO: something\nvaswani serve: error: ck/model.safetensors: truncated\n") == \
        "ck/model.safetensors: truncated"
    assert startup_error("Traceback (most recent call last):\n  File ...\nZeroDivisionError: a bug\n") == \
        "ZeroDivisionError: a bug (run `vaswani serve` with the same --checkpoint to see all it printed)"
    assert startup_error("") == "it exited without a message"


def test_serve_bench_reports_a_broken_checkpoint_in_one_line(tiny_checkpoint, tmp_path) -> None:
    checkpoint = tmp_path / "checkpoint"
    shutil.copytree(tiny_checkpoint, checkpoint)
    _truncated_weights(checkpoint)
    with pytest.raises(VaswaniError) as error:
        Server(checkpoint, ["--threads", "1"])  # a real `vaswani serve` process
    message = str(error.value)
    assert message.startswith(f"the server did not start: {checkpoint / 'model.safetensors'}: cannot be read as "
                              "safetensors weights; the file is truncated or corrupt")
    assert "\n" not in message and "Traceback" not in message
