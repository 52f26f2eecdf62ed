"""`vaswani bench train`: the models are the same size and see the same batches; the JSON names its provenance."""

from __future__ import annotations

import json
import statistics

import pytest
import torch

from vaswani.benchmarks.profiling import profile_by_kind
from vaswani.benchmarks.train_batches import fixed_batches, make_batches
from vaswani.benchmarks.train_peers import TorchTransformerBaseline
from vaswani.cli import main
from vaswani.config import ModelConfig
from vaswani.model import Transformer


def test_baseline_has_our_parameter_count_up_to_nn_transformers_final_norms() -> None:
    config = ModelConfig.preset("tiny")
    ours = Transformer(config).num_parameters()
    baseline = sum(p.numel() for p in TorchTransformerBaseline(config).parameters())
    assert baseline - ours == 2 * 2 * config.d_model  # nn.Transformer always adds encoder and decoder LayerNorms


def test_marian_peer_has_exactly_our_trainable_parameters() -> None:
    pytest.importorskip("transformers", reason="the MarianMT peer needs the bench extra (transformers)")
    from vaswani.benchmarks.train_peers import MarianPeer

    config = ModelConfig.preset("tiny")
    peer = MarianPeer(config)
    assert sum(p.numel() for p in peer.parameters() if p.requires_grad) == Transformer(config).num_parameters()
    batch = fixed_batches(1000, 1)[0]
    loss, _, _ = peer(batch.src[:2], batch.tgt_in[:2], batch.tgt_out[:2])
    assert torch.isfinite(loss) and loss > 0


def test_marian_peers_use_the_attention_implementation_they_name() -> None:
    pytest.importorskip("transformers", reason="the MarianMT peer needs the bench extra (transformers)")
    from vaswani.benchmarks.train_peers import PEERS

    config = ModelConfig.preset("tiny")
    batch = fixed_batches(1000, 1)[0]
    for peer_name, fused in (("marian", True), ("marian-eager", False)):
        torch.manual_seed(0)
        peer = PEERS[peer_name][1](config, 0.1)
        profile = profile_by_kind(lambda: peer(batch.src[:2], batch.tgt_in[:2], batch.tgt_out[:2]))
        operators = {o.name for o in profile.top_operators}
        assert ("attention kernel" in profile.kinds_ms) == fused and ("aten::bmm" in operators) != fused


def test_batches_respect_the_budget_and_shift_the_target() -> None:
    for batch in make_batches(ModelConfig.preset("tiny"), max_tokens=400, n_batches=3):
        src, tgt_in, tgt_out = batch.src, batch.tgt_in, batch.tgt_out
        assert batch.tokens == int((tgt_out != 0).sum())
        assert src.numel() <= 400 + src.size(0) and tgt_in.shape == tgt_out.shape
        words = tgt_out[:, :-1] > 3  # real words: the decoder input is the target shifted right by <s>
        assert torch.equal(tgt_in[:, 1:][words], tgt_out[:, :-1][words]) and bool((tgt_in[:, 0] == 1).all())
    batch = fixed_batches(1000, 1)[0]
    assert batch.src.shape == batch.tgt_in.shape == (64, 16) and batch.tokens == 64 * 16
    assert torch.equal(batch.tgt_in[:, 1:], batch.tgt_out[:, :-1])


def test_a_budget_below_the_longest_sentence_is_refused_in_one_line(tmp_path, capsys) -> None:
    # as the training sampler refuses it: no batch could hold the longest sentence
    assert main(["bench", "train", "--preset", "tiny", "--batches", "random", "--max-tokens", "20",
                 "--out", str(tmp_path / "b.json")]) == 2
    err = capsys.readouterr().err
    assert "max_tokens=20 is smaller than the longest random sentence" in err and "Traceback" not in err
    assert not (tmp_path / "b.json").exists()


def test_bench_train_smoke_writes_json_and_table(tmp_path, capsys) -> None:
    out = tmp_path / "bench.json"
    assert main(["bench", "train", "--preset", "tiny", "--precision", "fp32", "--steps", "1", "--warmup", "1",
                 "--repeats", "2", "--max-tokens", "256", "--device", "cpu", "--variant", "no-dropout:model.dropout=0",
                 "--out", str(out)]) == 0
    assert "torch.nn.Transformer" in capsys.readouterr().out
    report = json.loads(out.read_text())
    row = report["results"][0]
    assert row["models"]["vaswani"]["tokens_per_s"] > 0 and row["ours_over"]["torch.nn.Transformer"] > 0
    assert report["command"].startswith("vaswani") and "git" in report and "hardware" in report
    table = out.with_suffix(".md").read_text()
    assert "| vaswani |" in table
    assert f"Command: `{report['command']}`" in table and f"Commit: {report['git']['commit']}" in table
    # A variant is also set against each peer, repeat by repeat, as ours is.
    models = row["models"]
    variant, peer = models["vaswani no-dropout"]["runs"], models["torch.nn.Transformer"]["runs"]
    ratio = statistics.median(a / b for a, b in zip(variant, peer))
    assert row["variants_over_peers"] == {"vaswani no-dropout": {"torch.nn.Transformer": pytest.approx(ratio)}}
    assert f"vaswani no-dropout / torch.nn.Transformer **{ratio:.2f}×**" in table
    # MFU: the same FLOPs per token for models of the same dimensions, so MFU follows tokens/s; on this CPU the
    # peak is a large matmul measured in the same run, which a whole training step cannot beat.
    flops_per_token = {name: m["model_flops_per_s"] / m["tokens_per_s"] for name, m in models.items()}
    assert flops_per_token["torch.nn.Transformer"] == pytest.approx(flops_per_token["vaswani"])
    assert row["peak_source"] == "measured fp32 matmul"
    for name, m in models.items():
        assert 0 < m["mfu"] < 1 and m["mfu"] == pytest.approx(m["model_flops_per_s"] / row["peak_flops"])
        assert f"| {m['mfu']:.1%} |" in table


def test_bench_train_profile_puts_every_model_side_by_side(tmp_path) -> None:
    out = tmp_path / "bench.json"
    assert main(["bench", "train", "--preset", "tiny", "--precision", "fp32", "--steps", "1", "--warmup", "1",
                 "--repeats", "1", "--max-tokens", "256", "--device", "cpu", "--threads", "1", "--profile", "1", "2",
                 "--profile-passes", "2", "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    profile = report["profile"]
    one, two = "random batches, smoothed loss, fp32, 1 thread", "random batches, smoothed loss, fp32, 2 threads"
    assert list(profile) == [one, two]
    for key in profile:
        assert set(profile[key]) == {"vaswani", "torch.nn.Transformer"}
        for step in profile[key].values():  # a training step: forward and backward products, and the optimizer
            assert step["kinds_ms"]["matrix products"] > 0 and step["kinds_ms"]["optimizer (AdamW)"] > 0
    text = out.with_suffix(".profile.md").read_text()
    assert f"## {one}" in text and "| kind | vaswani ms | share | torch.nn.Transformer ms | share |" in text
    # ... with the rate of each model's matrix products against this run's torch.mm, and what ours could reach
    assert set(report["matmul_peak_gflops"]) == {"1", "2"} and report["profile_passes"] == 2
    assert all(step["passes"] == 2 for key in profile for step in profile[key].values())
    assert "2 times per model under `torch.profiler`" in text
    assert "- vaswani's matrix products ran at " in text and "- torch.nn.Transformer's matrix products" in text
    # The ceiling is taken against the timed steps, which ran on 1 thread: only the 1-thread profile has one.
    reference = profile[one]["torch.nn.Transformer"]
    rate = report["results"][0]["models"]["torch.nn.Transformer"]["tokens_per_s"]
    profiled_tokens = 2 * report["results"][0]["target_tokens_per_batch"]  # both batches (warm-up + 1 step)
    assert reference["timed_ms"] == pytest.approx(1e3 * profiled_tokens / rate)
    assert profile[two]["torch.nn.Transformer"]["timed_ms"] is None
    assert text.count("vaswani would run at most at ") == 1
    assert "torch.nn.Transformer's time in the timed steps" in text


@pytest.mark.parametrize("options, message", [
    (["--cuda-graphs"], "--cuda-graphs needs --length-buckets"),
    (["--cuda-graphs", "--length-buckets", "3"], "--cuda-graphs needs a CUDA device, and this run is on cpu"),
], ids=["no-buckets", "cpu"])
def test_cuda_graphs_are_refused_in_one_line_where_they_cannot_run(tmp_path, capsys, options, message) -> None:
    assert main(["bench", "train", "--preset", "tiny", "--device", "cpu", *options, "--out",
                 str(tmp_path / "b.json")]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "b.json").exists()


def test_multi30k_batches_in_length_buckets_have_their_buckets_shapes(tmp_path, monkeypatch, data_dir) -> None:
    from vaswani.benchmarks.train_batches import multi30k_batches

    monkeypatch.chdir(tmp_path)  # the prepared data is cached under runs/data/
    monkeypatch.setenv("VASWANI_CACHE", str(tmp_path / "cache"))
    batches = multi30k_batches(400, 900, 12, str(data_dir), length_buckets=3)
    shapes = {batch.src.shape for batch in batches}
    assert len(shapes) <= 3 and all(rows == 900 // length for rows, length in shapes)
    for batch in batches:
        assert batch.src.shape == batch.tgt_in.shape == batch.tgt_out.shape
        assert batch.tokens == int((batch.tgt_out != 0).sum()) > 0
