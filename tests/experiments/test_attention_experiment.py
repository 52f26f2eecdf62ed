"""`vaswani experiment attention`: the smoke run writes its results, which read back as the records they were
written from, the FLOP count is what PyTorch's FLOP counter counts less the scores a mask discards, the two
exact backends compute the same function, and memory falls with the window."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import pytest
import torch

from vaswani.experiments.attention.measure import backend_agreement, counted_flops, layer_training_flops
from vaswani.experiments.attention.report import findings
from vaswani.experiments.attention.results import AttentionResults, BackendAgreement, LayerPoint, results_json
from vaswani.experiments.attention.settings import SMOKE, AttentionSettings
from vaswani.records import from_json

RESULTS = Path(__file__).parents[2] / "results" / "attention" / "results.json"


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
    assert results["max_abs_diff_output"] < 1e-5 and results["max_abs_diff_band_mask"] < 1e-5
    check = results["flop_counter_check"]
    assert check["counted"] == check["rule"] + check["masked"]
    assert {r["variant"] for r in results["model_step"] if r["status"] == "ok"} == variants
    for name in ("time_vs_length", "memory_vs_length", "memory_vs_window"):
        assert (tmp_path / "attention" / f"{name}.png").is_file()
    assert "## Memory against the window k (T = 256, batch 2)" in (tmp_path / "attention" / "table.md").read_text()
    # Memory falls with k: at T = 256 a window of 8 keeps about 40 scores per query, one of 32 about 64, and
    # written-out attention without a window all 256 (CPU allocator replay: the same on every run). The fused
    # kernel keeps no scores without a window; with one it keeps the blocks' mask, again O(T·k).
    memory = {(p["backend"], p["window"]): p["extra_memory"] for p in results["window_sweep"]}
    assert memory["standard", 8] < 0.8 * memory["standard", 32] < 0.5 * memory["standard", None], memory
    assert memory["sdpa", 8] < memory["sdpa", 32], memory
    assert "`standard` with a window at T = 256" in (tmp_path / "attention" / "README.md").read_text()
    # The file reads back as the records it was written from, and writes the same JSON again.
    records = from_json(AttentionResults, results, "results.json")
    assert results_json(records) == results
    skipped = [p for p in results["microbenchmark"] + results["window_sweep"] if p["status"] != "ok"]
    assert all("seconds" not in p for p in skipped)  # a point not measured has no numbers, not nulls
    assert "val_loss_gap_seed" not in results and records.val_loss_gap_seed is None  # no training comparison


def test_the_published_results_read_as_records() -> None:
    results = json.loads(RESULTS.read_text())["results"]
    records = from_json(AttentionResults, results, str(RESULTS))
    assert results_json(records) == results
    assert records.training[0].variant == "standard" and records.val_loss_gap_seed is not None
    assert records.agreement[0].max_abs_diff_band_mask is None and records.agreement[-1].windowed


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("batch,length", [(1, 16), (3, 40)])
def test_the_flop_count_is_the_flop_counters_less_the_masked_scores(batch: int, length: int, causal: bool) -> None:
    settings = _settings(d_model=32, n_heads=4, causal=causal)
    check = counted_flops(settings, batch, length, torch.device("cpu"))
    assert check.counted == check.rule + check.masked
    d = settings.d_model
    pairs = length * (length + 1) // 2 if causal else length * length
    assert check.rule == 3 * (8 * batch * length * d * d + 4 * batch * pairs * d)
    assert (check.masked == 0) == (not causal)


def test_the_window_lowers_the_count_to_the_keys_it_allows() -> None:
    settings = _settings(d_model=32, causal=True)
    full, windowed = layer_training_flops(settings, 2, 64), layer_training_flops(settings, 2, 64, window=8)
    keys = sum(min(i + 1, 8) for i in range(64))  # causal window 8: query i sees min(i + 1, 8) keys
    assert full - windowed == 3 * 2 * 4 * 32 * (64 * 65 // 2 - keys)


@pytest.mark.parametrize("windowed", [False, True])
@pytest.mark.parametrize("causal", [False, True])
def test_standard_and_sdpa_agree_within_1e_5(windowed: bool, causal: bool, device) -> None:
    settings = _settings(d_model=64, n_heads=4, causal=causal)
    for length in (16, 64):
        result = backend_agreement(settings, 3, length, windowed, device)
        assert result.max_abs_diff_output < 1e-5
        assert result.max_abs_diff_input_grad < 1e-5
        assert result.output_scale > 1e-2  # not trivially zero
        if windowed:  # the window in blocks against the same layer given the full band mask
            assert result.max_abs_diff_band_mask < 1e-5


@pytest.mark.slow
def test_training_comparison_smoke(tmp_path: Path, data_dir: Path, device, experiment, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)  # the trainer caches prepared data under ./runs/data
    payload = experiment("attention", tmp_path / "out", "--smoke", "--train-steps", "3", "--data-dir",
                         str(data_dir), "--train-set", "data.vocab_size=400",
                         "--train-set", "train.precision=fp32", device=device)  # the gap below is fp32's
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
    def results(difference: float, sdpa_memory: int, sdpa_seconds: float, gap: float,
                seed_gap: float) -> AttentionResults:
        def point(variant: str, memory: int, seconds: float) -> LayerPoint:
            return LayerPoint(variant, variant, 1, 1024, None, "ok", seconds=seconds, extra_memory=memory)

        agreement = [BackendAgreement(1, 1024, False, difference, difference, output_scale=0.3)]
        points = [point("standard", 100, 1.0), point("sdpa", sdpa_memory, sdpa_seconds)]
        return AttentionResults("cpu", "fp32", points, [], agreement, difference, difference, difference,
                                None, [], [], "", val_loss_gap_standard_vs_sdpa=gap,
                                val_loss_gap_seed=seed_gap)

    settings = AttentionSettings(**{f.name: None for f in dataclasses.fields(AttentionSettings)})
    settings.window, settings.windows, settings.batch_sizes, settings.window_length = 50, [16, 64], [1], 1024
    good = " ".join(findings(results(1e-7, 10, 0.4, 1e-3, 1e-1), settings, torch.device("cpu")))
    assert "rounding" in good and "memory half (≥ 5× less at T = 1024) holds" in good
    assert "speed half (≥ 2× faster) holds" in good and "same training run up to rounding" in good
    bad = " ".join(findings(results(1e-2, 50, 0.9, 1e-1, 1e-1), settings, torch.device("cpu")))
    assert "not compute the same function" in bad and "does not hold" in bad and "different samples" in bad
