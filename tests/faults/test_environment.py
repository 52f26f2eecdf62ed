"""Faults of the machine rather than of a file: a device this torch build cannot use, memory that cannot be
allocated, a Ctrl-C at any moment of the start-up, a directory that is already something else. Each is one line
naming what to change, the exit status that says whose fault it is, and nothing written."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.skipif(torch.backends.mps.is_available(), reason="needs a torch build without MPS")
@pytest.mark.parametrize("device", ["mps", "xpu"])
def test_a_device_this_torch_build_lacks_is_named_not_blamed_on_the_checkpoint(run, assert_one_line, state,
                                                                               checkpoint, source_file,
                                                                               device: str) -> None:
    if getattr(torch, device, None) is not None and torch.xpu.is_available():
        pytest.skip("this machine has the device")
    before = state(checkpoint)
    code, _, err = run("translate", "--checkpoint", checkpoint, "--input", source_file, "--device", device)
    line = assert_one_line(code, err, 1, f"device '{device}'", f"cannot use {device} devices")
    assert "corrupt" not in line and "safetensors" not in line
    assert state(checkpoint) == before


@pytest.mark.skipif(torch.backends.mps.is_available(), reason="needs a torch build without MPS")
def test_training_on_a_device_this_build_lacks_is_one_line_before_any_step(run, assert_one_line, train_args,
                                                                           workdir, tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(workdir)
    run_dir = tmp_path / "run"
    code, _, err = run(*train_args(run_dir, "--set", "train.device=mps"))
    assert_one_line(code, err, 1, "device 'mps'", "train.device=cpu")
    assert not (run_dir / "checkpoints").exists() and not (run_dir / "metrics.jsonl").exists()


def test_a_model_too_large_to_allocate_names_the_settings_to_lower(run, assert_one_line, train_args, workdir,
                                                                   tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(workdir)
    run_dir = tmp_path / "run"
    # 4,096 x 4,000,000 feed-forward matrices: 64 GB each, more than this machine (or any test machine) holds
    code, _, err = run(*train_args(run_dir, "--set", "model.d_model=4096", "--set", "model.n_heads=1", "--set",
                                   "model.d_ff=4000000"))
    line = assert_one_line(code, err, 1, "out of host memory (", "GB requested); lower train.max_tokens=",
                           "model.d_ff=4000000")
    assert "Traceback" not in line
    assert not (run_dir / "checkpoints").exists()


def test_memory_that_runs_out_during_an_update_names_the_batch_settings(run, assert_one_line, train_args, workdir,
                                                                        tmp_path, monkeypatch) -> None:
    import vaswani.training.trainer as trainer

    def allocation_fails(*args, **kwargs):
        raise RuntimeError("[enforce fail at alloc_cpu.cpp:118] DefaultCPUAllocator: can't allocate memory: you "
                           "tried to allocate 68719476736 bytes. Error code 12 (Cannot allocate memory)")

    monkeypatch.chdir(workdir)
    monkeypatch.setattr(trainer, "train_step", allocation_fails)
    code, _, err = run(*train_args(tmp_path / "run"))
    assert_one_line(code, err, 1, "out of host memory (68.7 GB requested); lower train.max_tokens=",
                    "train.grad_accum=")


@pytest.mark.parametrize("error,expected", [
    (MemoryError(), True),
    (torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB"), True),
    (RuntimeError("DefaultCPUAllocator: can't allocate memory: you tried to allocate 8 bytes"), True),
    (RuntimeError("mat1 and mat2 shapes cannot be multiplied (2x3 and 4x5)"), False),
    (ValueError("out of memory"), False),
], ids=["MemoryError", "CUDA", "CPU-allocator", "shape-bug", "not-a-RuntimeError"])
def test_an_allocation_failure_is_told_from_a_bug(error: BaseException, expected: bool) -> None:
    from vaswani.errors import is_out_of_memory

    assert is_out_of_memory(error) is expected


@pytest.mark.parametrize("error,expected", [
    (torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB"),
     "out of GPU memory (2.00 GiB requested); lower train.max_tokens"),
    (RuntimeError("DefaultCPUAllocator: can't allocate memory: you tried to allocate 8000000000 bytes"),
     "out of host memory (8.0 GB requested); lower train.max_tokens"),
    (MemoryError(), "out of host memory; lower train.max_tokens"),
], ids=["CUDA", "CPU-allocator", "MemoryError"])
def test_an_allocation_failure_is_one_line_naming_the_memory_and_what_to_lower(error: BaseException,
                                                                              expected: str) -> None:
    from vaswani.errors import EnvironmentFault, out_of_memory

    fault = out_of_memory(error, "train.max_tokens")
    assert isinstance(fault, EnvironmentFault) and str(fault) == expected


def test_an_interrupt_while_the_command_modules_import_is_one_line(run, monkeypatch) -> None:
    import importlib

    real = importlib.import_module

    def interrupted(name: str, *args):  # noqa: ANN002 - import_module's
        if name.endswith(".commands"):
            raise KeyboardInterrupt
        return real(name, *args)

    monkeypatch.setattr(importlib, "import_module", interrupted)
    code, out, err = run("translate", "--help")
    assert (code, out, err) == (130, "", "interrupted\n")


def test_a_real_ctrl_c_during_start_up_is_one_line(tmp_path) -> None:
    """SIGINT while `python -m vaswani` is importing its modules (seen in -X importtime's log), in a process of its
    own: the signal is the fault."""
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    # `bench` imports torch to describe its options: a second or more after vaswani.cli, for the signal to land in
    # The child gets SIGINT's default handling: a test runner's worker may ignore SIGINT, and a child inherits that.
    process = subprocess.Popen([sys.executable, "-X", "importtime", "-m", "vaswani", "bench", "--help"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, cwd=tmp_path, text=True,
                               preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    log = []
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:  # wait until the command line itself is importing
        line = process.stderr.readline()
        log.append(line)
        if "vaswani.cli" in line or not line:
            break
    process.send_signal(signal.SIGINT)
    out, err = process.communicate(timeout=60)
    lines = [line for line in "".join(log + [err]).splitlines() if not line.startswith("import time:")]
    assert process.returncode == 130, lines
    assert lines == ["interrupted"] and out == ""


@pytest.mark.parametrize("kind", ["checkpoint", "export"])
def test_a_run_directory_that_is_something_else_is_refused_before_anything_is_written(run, assert_one_line, state,
                                                                                      checkpoint, train_args,
                                                                                      workdir, tmp_path, monkeypatch,
                                                                                      kind: str) -> None:
    from vaswani.io import write_manifest

    monkeypatch.chdir(workdir)
    if kind == "export":
        write_manifest(checkpoint, "export")
    before = state(checkpoint)
    code, _, err = run(*train_args(checkpoint))
    assert_one_line(code, err, 2, f"{checkpoint} is a {kind}", "not a run directory")
    assert state(checkpoint) == before  # not even a lock file: its tokenizer.json is never overwritten


def test_a_folder_of_other_files_is_no_run_directory(run, assert_one_line, state, train_args, workdir, tmp_path,
                                                     monkeypatch) -> None:
    monkeypatch.chdir(workdir)
    folder = tmp_path / "notes"
    folder.mkdir()
    (folder / "tokenizer.json").write_text("my own file")
    code, _, err = run(*train_args(folder))
    assert_one_line(code, err, 2, f"{folder} is not empty and holds no run (tokenizer.json)", "--run-dir")
    assert (folder / "tokenizer.json").read_text() == "my own file"


def test_no_command_writes_into_its_own_inputs(run, assert_one_line, state, checkpoint, source_file, references,
                                               tmp_path) -> None:
    evaluation = tmp_path / "evaluation"
    common = ["--beam", "1", "--max-len-a", "0", "--max-len-b", "4", "--device", "cpu"]
    assert run("evaluate", "--checkpoint", checkpoint, "--src", source_file, "--ref", references, "--out", evaluation,
               *common)[0] == 0
    before = state(tmp_path)
    cases = [
        (["compare", evaluation, "--out", evaluation], f"--out {evaluation} is {evaluation}, an input"),
        (["compare", evaluation / "results.json", "--out", evaluation, "--force"], f"holds {evaluation}/results.json"),
        (["evaluate", "--checkpoint", checkpoint, "--src", source_file, "--ref", references, "--out", checkpoint,
          *common], f"--out {checkpoint} is {checkpoint}, an input"),
        (["evaluate", "--checkpoint", checkpoint, "--src", source_file, "--ref", references, "--out", tmp_path,
          "--force", *common], f"--out {tmp_path} holds"),
        (["average", "--checkpoints", checkpoint, checkpoint, "--out", checkpoint, "--force"], f"is {checkpoint}"),
        (["export", "--checkpoint", checkpoint, "--format", "hf", "--out", tmp_path, "--force"], f"holds {checkpoint}"),
    ]
    for argv, fragment in cases:
        code, _, err = run(*argv)
        assert_one_line(code, err, 2, fragment, "pick a new directory")
    assert state(tmp_path) == before
