"""The fault loop started from a process that has initialised CUDA: its training processes must not be forks of that
process (CUDA cannot be re-initialised in a forked child)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from vaswani.tools.faults import fault_loop

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]


def test_the_fault_loop_runs_from_a_process_holding_a_cuda_context(tmp_path: Path, data_dir: Path,
                                                                   monkeypatch) -> None:
    torch.zeros(1, device="cuda")  # this process now holds a CUDA context
    monkeypatch.setenv("VASWANI_DATA", str(data_dir))
    monkeypatch.setenv("VASWANI_CACHE", str(tmp_path / "cache"))
    result = fault_loop(tmp_path / "work", kills=1, seed=0, max_steps=6, log=lambda message: None)
    assert result.kills_done == 1 and result.bit_identical and result.every_checkpoint_loaded
