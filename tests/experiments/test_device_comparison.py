"""`vaswani experiment devices`: phase timings add up to the step, and a CPU-only machine says so."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from vaswani.experiments.device_comparison import epoch_steps


def test_smoke_run_writes_results(tmp_path: Path, device, experiment) -> None:
    payload = experiment("devices", tmp_path / "devices", "--smoke", device=device)
    results = payload["results"]
    cpu = results["devices"]["cpu"]
    for phase in ("forward", "backward", "optimizer"):
        assert cpu[f"{phase}_ms"] > 0
    parts = cpu["forward_ms"] + cpu["backward_ms"] + cpu["optimizer_ms"]
    assert parts == pytest.approx(cpu["step_ms"], rel=1e-6)
    assert cpu["peak_memory"] > 0 and cpu["epoch_minutes"] > 0
    table = (tmp_path / "devices" / "table.md").read_text()
    assert "extrapolated" in table
    if device.type == "cuda":
        assert results["gpu_available"] and results["cpu_over_gpu"]["step_ms"] > 0
    elif not torch.cuda.is_available():
        assert not results["gpu_available"] and results["note"]
        assert "No GPU visible" in table


def test_epoch_steps_cover_the_corpus() -> None:
    assert epoch_steps(10**9, n_pairs=1000) == 1
    assert epoch_steps(15, n_pairs=500) == 500  # every side has >= 8 tokens: no two pairs share 15 tokens
    assert epoch_steps(3000) < epoch_steps(1000)
