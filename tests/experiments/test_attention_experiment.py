"""`vaswani experiment attention`: the smoke run writes its results, the FLOP formula is what PyTorch's FLOP
counter counts, and the two exact backends compute the same function."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import pytest
import torch

from vaswani.experiments.attention import (
    AttentionSettings,
    SMOKE,
    attended_keys,
    attention_flops,
    backend_agreement,
    counted_flops,
)


def _settings(**changes) -> AttentionSettings:
    values = dict(SMOKE, window=8, causal=False, dropout=0.0, train_steps=0, train_settings=[], data_dir=None,
                  precision="fp32", smoke=True)
    values.update(changes)
    return AttentionSettings(**values)


def test_smoke_run_writes_results(tmp_path: Path, device, experiment) -> None:
    payload = experiment("attention", tmp_path / "attention", "--smoke", device=device)
    results = payload["results"]
    measured = [p for p in results["microbenchmark"] if p["status"] == "ok"]
    variants = {p["variant"] for p in measured}
    assert variants == {"standard", "sdpa", "standard+window", "sdpa+window"}
    assert all(p["seconds"] > 0 and p["extra_memory"] > 0 and p["flops"] > 0 for p in measured)
    assert results["max_abs_diff_output"] < 1e-5
    assert results["flop_counter_check"]["counted"] == results["flop_counter_check"]["analytic"]
    assert {r["variant"] for r in results["model_step"] if r["status"] == "ok"} == variants
    assert (tmp_path / "attention" / "time_vs_length.png").is_file()
    assert (tmp_path / "attention" / "memory_vs_length.png").is_file()


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("batch,length", [(1, 16), (3, 40)])
def test_flop_formula_equals_the_flop_counter(batch: int, length: int, causal: bool) -> None:
    settings = _settings(d_model=32, n_heads=4, causal=causal)
    check = counted_flops(settings, batch, length, torch.device("cpu"))
    assert check["counted"] == check["analytic"]
    d = settings.d_model
    assert check["analytic"] == 3 * (8 * batch * length * d * d + 4 * batch * length * length * d)


def test_useful_flops_count_only_the_keys_the_window_allows() -> None:
    # causal window 2 over 4 positions: queries see 1, 2, 2, 2 keys; bidirectional |i - j| <= 1: 2, 3, 3, 2
    assert attended_keys(4, causal=True, window=2) == pytest.approx(7 / 4)
    assert attended_keys(4, causal=False, window=2) == pytest.approx(10 / 4)
    assert attended_keys(5, causal=True, window=None) == pytest.approx(3.0)
    full = attention_flops(2, 64, 32)
    windowed = attention_flops(2, 64, 32, window=8)
    assert windowed["forward"] == full["forward"]  # executed: the kernels compute every score anyway
    assert windowed["useful_forward"] < full["useful_forward"] == full["forward"]


@pytest.mark.parametrize("windowed", [False, True])
@pytest.mark.parametrize("causal", [False, True])
def test_standard_and_sdpa_agree_within_1e_5(windowed: bool, causal: bool, device) -> None:
    settings = _settings(d_model=64, n_heads=4, causal=causal)
    for length in (16, 64):
        result = backend_agreement(settings, 3, length, windowed, device)
        assert result["max_abs_diff_output"] < 1e-5
        assert result["max_abs_diff_input_grad"] < 1e-5
        assert result["output_scale"] > 1e-2  # not trivially zero


@pytest.mark.slow
def test_training_comparison_smoke(tmp_path: Path, data_dir: Path, device, experiment, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)  # the trainer caches prepared data under ./runs/data
    payload = experiment("attention", tmp_path / "out", "--smoke", "--train-steps", "3", "--data-dir",
                         str(data_dir), "--train-set", "data.vocab_size=400", device=device)
    rows = payload["results"]["training"]
    assert [r["variant"] for r in rows] == ["standard", "sdpa", "sdpa+window", "sdpa, seed+1"]
    assert [r["seed"] for r in rows] == [0, 0, 0, 1]
    for row in rows:
        assert row["steps"] == 3 and math.isfinite(row["final_val_loss"]) and row["final_val_bleu"] is not None
        assert row["seconds_per_batch"] > 0 and row["peak_memory"] > 0
    gap = payload["results"]["val_loss_gap_standard_vs_sdpa"]
    assert math.isfinite(gap) and payload["results"]["val_loss_gap_seed"] > 0  # another seed: another run
    if device.type == "cpu":  # same dropout masks on CPU (SDPA's math fallback): the runs coincide
        assert gap < 1e-4
    assert "Validation-loss gap" in (tmp_path / "out" / "table.md").read_text()


def test_findings_are_worded_by_the_numbers() -> None:
    from vaswani.experiments.attention import AttentionSettings, findings

    def results(difference: float, sdpa_memory: int, sdpa_seconds: float, gap: float, seed_gap: float) -> dict:
        point = lambda variant, memory, seconds: {"variant": variant, "batch_size": 1, "length": 1024,  # noqa: E731
                                                  "status": "ok", "extra_memory": memory, "seconds": seconds}
        return {"agreement": [{"output_scale": 0.3}], "max_abs_diff_output": difference,
                "microbenchmark": [point("standard", 100, 1.0), point("sdpa", sdpa_memory, sdpa_seconds)],
                "val_loss_gap_standard_vs_sdpa": gap, "val_loss_gap_seed": seed_gap}

    settings = AttentionSettings(**{f.name: None for f in dataclasses.fields(AttentionSettings)})
    settings.window = 50
    good = " ".join(findings(results(1e-7, 10, 0.4, 1e-3, 1e-1), settings, torch.device("cpu")))
    assert "rounding" in good and "memory half (≥ 5× less at T = 1024) holds" in good
    assert "speed half (≥ 2× faster) holds" in good and "same training run up to rounding" in good
    bad = " ".join(findings(results(1e-2, 50, 0.9, 1e-1, 1e-1), settings, torch.device("cpu")))
    assert "not compute the same function" in bad and "does not hold" in bad and "different samples" in bad
