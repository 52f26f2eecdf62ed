"""`vaswani bench train`: both models are the same size and see the same batches; the JSON names its provenance."""

from __future__ import annotations

import json

import torch

from vaswani.benchmarks.train import TorchTransformerBaseline, make_batches
from vaswani.cli import main
from vaswani.config import ModelConfig
from vaswani.model import Transformer


def test_baseline_has_our_parameter_count_up_to_nn_transformers_final_norms() -> None:
    config = ModelConfig.preset("tiny")
    ours = Transformer(config).num_parameters()
    baseline = sum(p.numel() for p in TorchTransformerBaseline(config).parameters())
    assert baseline - ours == 2 * 2 * config.d_model  # nn.Transformer always adds encoder and decoder LayerNorms


def test_batches_respect_the_budget_and_shift_the_target() -> None:
    for batch in make_batches(ModelConfig.preset("tiny"), max_tokens=400, n_batches=3):
        src, tgt_in, tgt_out = batch.src, batch.tgt_in, batch.tgt_out
        assert batch.n_tgt_tokens == int((tgt_out != 0).sum())
        assert src.numel() <= 400 + src.size(0) and tgt_in.shape == tgt_out.shape
        words = tgt_out[:, :-1] > 3  # real words: the decoder input is the target shifted right by <s>
        assert torch.equal(tgt_in[:, 1:][words], tgt_out[:, :-1][words]) and bool((tgt_in[:, 0] == 1).all())


def test_bench_train_smoke_writes_json(tmp_path, capsys) -> None:
    out = tmp_path / "bench.json"
    assert main(["bench", "train", "--preset", "tiny", "--precision", "fp32", "--steps", "1", "--warmup", "1",
                 "--repeats", "1", "--max-tokens", "256", "--device", "cpu", "--out", str(out)]) == 0
    assert "speed-up" in capsys.readouterr().out
    report = json.loads(out.read_text())
    row = report["results"][0]
    assert row["vaswani"]["tokens_per_s"] > 0 and row["torch.nn.Transformer"]["tokens_per_s"] > 0
    assert report["command"].startswith("vaswani") and "git" in report and "hardware" in report
