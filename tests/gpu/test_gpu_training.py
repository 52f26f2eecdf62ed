"""The trainer's GPU path on a real CUDA device follows the rules the CPU tests check (training/device_choices.py):
a deferred update on bucketed batches never makes the host wait for the device, CUDA-graph training takes the
eager updates by replaying its graphs (none skipped: the backend would otherwise run eagerly and only log a hint),
and a bucketed run with CUDA graphs logs its whole-run MFU and what compiling did.

Skipped without a GPU; on a lent one ``python -m pytest -m gpu`` runs them with the other CUDA tests.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import torch._dynamo
from torch._dynamo.utils import counters

from vaswani.config import ModelConfig
from vaswani.data.batching import Batch
from vaswani.data.buckets import pad_to_shape
from vaswani.model import Dropout, Transformer
from vaswani.training.config import TrainConfig
from vaswani.training.device_choices import (
    CompilationWatch,
    CompileOptions,
    compile_options,
    defers_host_reads,
    loss_over_all_positions,
)
from vaswani.training.loss import TranslationLoss
from vaswani.training.optim import build_optimizer
from vaswani.training.presets import apply_settings, load_preset
from vaswani.training.run import train
from vaswani.training.schedule import build_scheduler
from vaswani.training.step import read_results, train_step
from vaswani.training.summary import Stop

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

CUDA = torch.device("cuda")
VOCAB = 200


def bucketed_batch(rows: int, length: int, real_rows: int, seed: int) -> Batch:
    """``real_rows`` random pairs (the last ones shorter) padded to a bucket's rows × length, in pinned memory."""
    generator = torch.Generator().manual_seed(seed)
    src = torch.randint(4, VOCAB, (real_rows, length - 2), generator=generator)
    tgt = torch.randint(4, VOCAB, (real_rows, length - 1), generator=generator)
    src[real_rows // 2 :, -3:] = 0
    tgt[real_rows // 2 :, -3:] = 0
    batch = Batch(src, tgt[:, :-1], tgt[:, 1:], int((src != 0).sum()), int((tgt[:, 1:] != 0).sum()),
                  torch.arange(real_rows))
    padded = pad_to_shape(batch, rows, length, pad_id=0)
    return Batch(padded.src.pin_memory(), padded.tgt_in.pin_memory(), padded.tgt_out.pin_memory(),
                 padded.n_src_tokens, padded.n_tgt_tokens, padded.indices).to(CUDA, non_blocking=True)


def training(compiled: CompileOptions | None = None):
    torch.manual_seed(0)
    model = TranslationLoss(Transformer(ModelConfig.preset("tiny", vocab_size=VOCAB, dropout=0.0)), 0.1,
                            all_positions=loss_over_all_positions(CUDA, compiled=compiled is not None)).to(CUDA)
    config = TrainConfig(warmup_steps=3)
    optimizer = build_optimizer(model, config, CUDA)
    scheduler = build_scheduler(optimizer, config, 64, total_steps=20)
    module = torch.compile(model, **compiled.arguments()) if compiled is not None else model
    return model, module, optimizer, scheduler


def test_the_cuda_rules_defer_host_reads_and_use_the_loss_over_all_positions() -> None:
    assert defers_host_reads("auto", CUDA) and loss_over_all_positions(CUDA, compiled=False)


def test_a_deferred_update_on_bucketed_batches_never_waits_for_the_device() -> None:
    _, module, optimizer, scheduler = training()
    batches = [bucketed_batch(24, 12, 20, seed) for seed in range(4)]
    train_step(module, optimizer, batches[:1], batches[0].n_tgt_tokens, precision="bf16", clip_grad_norm=1.0,
               scheduler=scheduler, defer_reads=True)  # warm-up: library handles, kernels
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")  # any host synchronisation raises
    try:
        results = [train_step(module, optimizer, [batch], batch.n_tgt_tokens, precision="bf16", clip_grad_norm=1.0,
                              scheduler=scheduler, defer_reads=True) for batch in batches[1:]]
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert all(result.finite for result in read_results(results))


def test_cuda_graph_training_takes_the_eager_updates() -> None:
    shapes = [(24, 12), (12, 24)]
    batches = [bucketed_batch(rows, length, rows - 3, seed) for seed, (rows, length) in enumerate(shapes * 4)]
    torch._dynamo.reset()
    counters.clear()
    weights, losses = [], []
    for options in (None, compile_options(False, True, CUDA, bucketed=True)):
        model, module, optimizer, scheduler = training(options)
        with CompilationWatch() as watch:
            results = [train_step(module, optimizer, [batch], batch.n_tgt_tokens, clip_grad_norm=1.0,
                                  scheduler=scheduler, defer_reads=True) for batch in batches]
        losses.append([result.loss for result in read_results(results)])
        weights.append({name: tensor.clone() for name, tensor in model.state_dict().items()})
    assert counters["stats"]["unique_graphs"] == len(shapes)  # one graph per batch shape
    # Each shape's forward and backward run eagerly once (warm-up), are recorded once, then replay: the last two
    # updates of each shape replay two graphs each.
    graphs = watch.counts()
    assert graphs.cuda_graph_skips == 0 and graphs.graph_breaks == 0, graphs
    assert graphs.cuda_graph_replays >= len(batches), graphs
    # Every update's loss depends on all the weights before it. The weights themselves are compared where the
    # gradient is more than rounding noise: the keys' biases shift every score of a query alike, so their gradient
    # is noise, which Adam turns into updates of either sign.
    torch.testing.assert_close(torch.tensor(losses[1]), torch.tensor(losses[0]), rtol=1e-4, atol=1e-4)
    for name in ("model.output.weight", "model.decoder.layers.1.ffn.down.weight"):
        torch.testing.assert_close(weights[1][name], weights[0][name], rtol=1e-3, atol=1e-5, msg=name)
    torch._dynamo.reset()


def test_dropout_draws_new_masks_at_every_replay() -> None:
    """The random numbers of a recorded graph come from the CUDA generator's offset, which advances at every replay:
    the model's dropout masks differ from one replay to the next instead of being frozen into the graph."""
    torch._dynamo.reset()
    dropout = torch.compile(Dropout(0.5), **compile_options(False, True, CUDA, bucketed=True).arguments())
    x = torch.ones(64, 64, device=CUDA, requires_grad=True)
    outputs = []
    with CompilationWatch() as watch:
        for _ in range(5):  # a warm-up, a recording, then three replays
            y = dropout(x)
            y.sum().backward()
            outputs.append(y.detach().clone())
    torch._dynamo.reset()
    graphs = watch.counts()
    assert graphs.cuda_graph_skips == 0 and graphs.cuda_graph_replays >= 3, graphs
    replays = outputs[2:]
    assert all(not torch.equal(a, b) for a, b in zip(replays, replays[1:]))
    assert all(0.4 < (out == 0).float().mean() < 0.6 for out in replays)


def test_a_bucketed_cuda_graph_run_reports_its_whole_run_mfu(tmp_path: Path, data_dir: Path, monkeypatch) -> None:
    monkeypatch.setenv("VASWANI_DATA", str(data_dir))
    monkeypatch.setenv("VASWANI_CACHE", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)
    config = apply_settings(load_preset("smoke"), [
        "train.max_epochs=null", "train.max_steps=40", "train.eval_every_steps=20", "train.bleu_subset=16",
        "train.progress=false", "train.log_every_steps=10", "train.final_model=false", "train.device=cuda",
        "train.precision=bf16", "train.length_buckets=3", "train.cuda_graphs=true"])
    summary = train(config, tmp_path / "run")
    assert summary.stop_reason is Stop.MAX_STEPS and summary.skipped_updates == 0
    assert 0.0 < summary.mfu < 1.0
    compilation = summary.compilation  # at most one graph per shape; every update after a shape's first two replays
    assert compilation.cuda_graph_skips == 0 and compilation.graph_breaks == 0, compilation
    assert compilation.graphs == compilation.recompiles + 1 <= 3, compilation
    assert compilation.cuda_graph_replays >= 40, compilation
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    steps = [row for row in rows if row["kind"] == "train"]
    assert [row["step"] for row in steps] == [10, 20, 30, 40] and all(0.0 < row["mfu"] < 1.0 for row in steps)
    assert steps[-1]["loss"] < steps[0]["loss"]
