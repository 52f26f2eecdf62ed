"""The training choices that depend on the device, each checked as a rule on the CPU (tests/gpu checks that CUDA
follows them), and torch.compile making one graph per length bucket."""

from __future__ import annotations

import pytest
import torch
import torch._dynamo
from torch._dynamo.utils import counters

from vaswani.config import ModelConfig
from vaswani.errors import ConfigError
from vaswani.model import Transformer
from vaswani.training.config import apply_settings, load_preset
from vaswani.training.device_choices import (compile_options, decoding_batches, defers_host_reads,
                                             loss_over_all_positions, recompile_limit)
from vaswani.training.loss import TranslationLoss

CPU, CUDA = torch.device("cpu"), torch.device("cuda")


def test_the_host_reads_every_update_on_a_cpu_and_at_log_steps_on_cuda() -> None:
    assert defers_host_reads("auto", CUDA) and not defers_host_reads("auto", CPU)
    assert defers_host_reads("log-steps", CPU) and not defers_host_reads("every-update", CUDA)


def test_the_loss_gathers_real_positions_only_in_eager_cpu_training() -> None:
    assert not loss_over_all_positions(CPU, compiled=False)
    assert loss_over_all_positions(CPU, compiled=True) and loss_over_all_positions(CUDA, compiled=False)


def test_compile_options_per_mode() -> None:
    assert compile_options(False, False, CUDA, bucketed=True) is None
    assert compile_options(True, False, CPU, bucketed=True) == {"dynamic": False}
    assert compile_options(True, False, CPU, bucketed=False) == {}  # torch's default: shape-generic after a recompile
    assert compile_options(True, True, CUDA, bucketed=True) == {"dynamic": False, "mode": "reduce-overhead"}
    assert compile_options(False, True, CUDA, bucketed=True) == {"dynamic": False, "backend": "cudagraphs"}
    assert recompile_limit(5) > 5


def test_cuda_graphs_are_refused_in_one_line_where_they_cannot_run() -> None:
    with pytest.raises(ConfigError) as error:
        compile_options(False, True, CPU, bucketed=True)
    assert str(error.value) == ("train.cuda_graphs needs a CUDA device, and this run is on cpu; set "
                                "train.cuda_graphs=false")
    smoke = load_preset("smoke")
    with pytest.raises(ConfigError, match="train.cuda_graphs needs train.length_buckets"):
        apply_settings(smoke, ["train.cuda_graphs=true"])
    with pytest.raises(ConfigError, match="train.cuda_graphs needs train.grad_accum=1"):
        apply_settings(smoke, ["train.cuda_graphs=true", "train.length_buckets=4", "train.grad_accum=2"])


def test_validation_and_the_final_model_decode_in_large_batches_on_cuda_only() -> None:
    assert decoding_batches(CPU) == {}  # the Translator's own limits
    assert decoding_batches(CUDA)["batch_size"] >= 1000 and decoding_batches(CUDA)["max_tokens"] >= 100_000


def test_compiling_the_training_module_makes_one_graph_per_batch_shape() -> None:
    """With buckets the compiled loss module is traced once per (rows, length) shape and never again, with no graph
    break (the loss over all positions has no data-dependent shape). The cheap "eager" backend keeps this fast: it
    traces with Dynamo, as every backend does, and runs the traced graph as it is."""
    config = ModelConfig.preset("tiny", vocab_size=40, dropout=0.0, n_encoder_layers=1, n_decoder_layers=1)
    module = TranslationLoss(Transformer(config), 0.1, all_positions=loss_over_all_positions(CPU, compiled=True))
    options = compile_options(True, False, CPU, bucketed=True)
    shapes = [(12, 5), (8, 8), (5, 12)]  # (rows, length), as a budget of 60 positions makes them
    torch._dynamo.reset()
    counters.clear()
    previous_limit = torch._dynamo.config.recompile_limit
    torch._dynamo.config.recompile_limit = recompile_limit(len(shapes))
    try:
        compiled = torch.compile(module, **options, backend="eager")
        for _ in range(3):
            for rows, length in shapes:
                src = torch.randint(3, 40, (rows, length))
                tgt = torch.randint(3, 40, (rows, length + 1))
                tgt[-1, length // 2 :] = 0  # padding, as a bucket pads its shorter pairs
                loss, _, _ = compiled(src, tgt[:, :-1], tgt[:, 1:])
                loss.backward()
        assert counters["stats"]["unique_graphs"] == len(shapes)
        assert sum(counters["graph_break"].values()) == 0, dict(counters["graph_break"])
    finally:
        torch._dynamo.config.recompile_limit = previous_limit
        torch._dynamo.reset()
