"""`vaswani experiment memory`: the estimate's training state is exactly 16 bytes per parameter for fp32 AdamW,
its peak matches the measured peak, and the budget search is consistent."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from vaswani.config import ModelConfig
from vaswani.experiments.memory import MemoryResults, measure_training_peak
from vaswani.experiments.memory_estimate import BatchShape, estimate_training_memory, largest_batch_within
from vaswani.model import Transformer
from vaswani.records import from_json

CONFIGS = {
    "tiny": ModelConfig.preset("tiny"),
    "untied-pre-ln": ModelConfig.preset("tiny", tie_embeddings="none", norm="pre", positions="learned"),
    "small": ModelConfig.preset("small"),
}


def test_smoke_run_writes_results(tmp_path: Path, device, experiment) -> None:
    payload = experiment("memory", tmp_path / "memory", "--smoke", device=device)
    results = from_json(MemoryResults, payload["results"], "results.json")  # every field read back checked
    tolerance = 0.15 if device.type == "cpu" else 0.35
    for row in results.rows:
        assert row.measured.measured_peak > 0
        assert abs(row.relative_error) < tolerance, row
    assert results.budget.predicted_batch_size > 0 and results.budget.checks
    assert (tmp_path / "memory" / "breakdown.png").is_file()


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_training_state_is_four_fp32_copies_of_the_parameters(name: str) -> None:
    config = CONFIGS[name]
    n_params = Transformer(config).num_parameters()
    parts = estimate_training_memory(config, BatchShape(4, 10, 12), "fp32", "cpu").parts
    assert parts["parameters"] + parts["gradients"] + parts["adamw moments"] == 4 * n_params * 4
    # under autocast the master weights, gradients and moments stay fp32; the bf16 weight copies come on top
    bf16 = estimate_training_memory(config, BatchShape(4, 10, 12), "bf16", "cuda").parts
    assert bf16["parameters"] + bf16["gradients"] + bf16["adamw moments"] == 4 * n_params * 4
    assert 0 < bf16["autocast weight copies"] <= 2 * n_params


def test_standard_attention_scores_grow_with_the_square_of_the_length() -> None:
    config = ModelConfig.preset("tiny", attention="standard")
    short = estimate_training_memory(config, BatchShape(2, 16, 16), "fp32", "cpu").parts
    long = estimate_training_memory(config, BatchShape(2, 32, 32), "fp32", "cpu").parts
    assert long["attention scores (B·H·T²)"] == pytest.approx(4 * short["attention scores (B·H·T²)"])
    fused = estimate_training_memory(ModelConfig.preset("tiny", attention="sdpa"), BatchShape(2, 32, 32), "fp32",
                                     "cuda").parts
    assert fused.get("attention scores (B·H·T²)", 0) == 0  # flash / memory-efficient kernels keep no scores


@pytest.mark.parametrize("changes", [dict(attention="standard"), dict(attention="sdpa", dropout=0.0),
                                     dict(attention="standard", norm="pre", activation="gelu")])
def test_estimated_peak_matches_the_measured_peak_on_cpu(changes: dict) -> None:
    config = ModelConfig.preset("tiny", **changes)
    shape = BatchShape(8, 24, 20)
    estimate = estimate_training_memory(config, shape, "fp32", "cpu").peak
    measured = measure_training_peak(config, shape, torch.device("cpu"), "fp32").peak
    assert abs(estimate - measured) / measured < 0.05


def test_largest_batch_is_the_last_that_fits_the_budget() -> None:
    config = ModelConfig.preset("tiny")
    budget = 64 * 2**20
    batch = largest_batch_within(config, 32, budget, "fp32", "cpu")
    peak = lambda b: estimate_training_memory(config, BatchShape(b, 32, 32), "fp32", "cpu").peak  # noqa: E731
    assert batch > 1 and peak(batch) <= budget < peak(batch + 1)
    assert largest_batch_within(config, 32, 1024, "fp32", "cpu") == 0  # 1 KiB holds not even the weights
