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
from vaswani.training.device_choices import (
    CompilationCounts,
    CompilationWatch,
    compile_options,
    decoding_batches,
    defers_host_reads,
    loss_over_all_positions,
    recompile_limit,
)
from vaswani.training.loss import TranslationLoss
from vaswani.training.presets import apply_settings, load_preset

CPU, CUDA = torch.device("cpu"), torch.device("cuda")


def test_the_host_reads_every_update_on_a_cpu_and_at_log_steps_on_cuda() -> None:
    assert defers_host_reads("auto", CUDA) and not defers_host_reads("auto", CPU)
    assert defers_host_reads("log-steps", CPU) and not defers_host_reads("every-update", CUDA)


def test_the_loss_gathers_real_positions_only_in_eager_cpu_training() -> None:
    assert not loss_over_all_positions(CPU, compiled=False)
    assert loss_over_all_positions(CPU, compiled=True) and loss_over_all_positions(CUDA, compiled=False)


def test_compile_options_per_mode() -> None:
    assert compile_options(False, False, CUDA, bucketed=True) is None
    assert compile_options(True, False, CPU, bucketed=True).arguments() == {"dynamic": False}
    # torch's default: shape-generic after a recompile
    assert compile_options(True, False, CPU, bucketed=False).arguments() == {}
    assert compile_options(True, True, CUDA, bucketed=True).arguments() == {"dynamic": False, "mode": "reduce-overhead"}
    assert compile_options(False, True, CUDA, bucketed=True).arguments() == {"dynamic": False,
                                                                             "backend": "cudagraphs"}
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
        compiled = torch.compile(module, **options.arguments(), backend="eager")
        with CompilationWatch() as watch:
            for _ in range(3):
                for rows, length in shapes:
                    src = torch.randint(3, 40, (rows, length))
                    tgt = torch.randint(3, 40, (rows, length + 1))
                    tgt[-1, length // 2 :] = 0  # padding, as a bucket pads its shorter pairs
                    loss, _, _ = compiled(src, tgt[:, :-1], tgt[:, 1:])
                    loss.backward()
        assert counters["stats"]["unique_graphs"] == len(shapes)
        assert sum(counters["graph_break"].values()) == 0, dict(counters["graph_break"])
        assert watch.counts() == CompilationCounts(graphs=3, recompiles=2, graph_breaks=0, cuda_graph_replays=0,
                                                   cuda_graph_skips=0, cuda_graph_non_static_inputs=0)
    finally:
        torch._dynamo.config.recompile_limit = previous_limit
        torch._dynamo.reset()


def test_the_compilation_watch_counts_only_while_it_is_open() -> None:
    """Dynamo's counters are the process's: the watch reports their change while it was open, and counts CUDA-graph
    replays by wrapping ``torch.cuda.CUDAGraph.replay`` only as long as it is open."""
    function = torch.compile(lambda x: torch.sin(x) * 2, backend="eager", dynamic=False)
    replay = torch.cuda.CUDAGraph.replay
    torch._dynamo.reset()
    try:
        function(torch.ones(2))  # compiled before the watch: not its graph
        with CompilationWatch() as watch:
            assert torch.cuda.CUDAGraph.replay is not replay
            function(torch.ones(2))  # the graph made before
            function(torch.ones(3))  # a new shape: one graph
            assert watch.counts().graphs == 1
        function(torch.ones(4))  # after the watch: not counted
        assert torch.cuda.CUDAGraph.replay is replay
        assert watch.counts() == CompilationCounts(graphs=1, recompiles=0, graph_breaks=0, cuda_graph_replays=0,
                                                   cuda_graph_skips=0, cuda_graph_non_static_inputs=0)
        assert counters["stats"]["unique_graphs"] >= 3
    finally:
        torch._dynamo.reset()


def test_a_compiled_run_records_what_compiling_did_in_its_summary(tmp_path, data_dir, monkeypatch) -> None:
    """The summary's ``compilation``: over one epoch of three length buckets, one graph per batch shape (the first
    compiled, the others recompiles), no graph break, and no CUDA graph on a CPU. Dynamo's cheap "eager" backend
    stands in for Inductor; validation runs the model uncompiled. No dropout: the CPU's own masks
    (model/dropout.py) draw with an in-place ``random_``, where Dynamo breaks the graph (CUDA takes F.dropout)."""
    from vaswani.training import device_choices
    from vaswani.training import trainer as trainer_module
    from vaswani.training.data import settle

    monkeypatch.setenv("VASWANI_DATA", str(data_dir))
    monkeypatch.setenv("VASWANI_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(device_choices, "compile_options",
                        lambda *args, **kwargs: device_choices.CompileOptions(dynamic=False, backend="eager"))
    config = apply_settings(load_preset("smoke"), [
        "data.train_split=val", "model.dropout=0.0", "train.max_tokens=3000", "train.length_buckets=3",
        "train.max_steps=null", "train.max_epochs=1", "train.eval_every_steps=null", "train.bleu_subset=0",
        "train.progress=false", "train.device=cpu", "train.precision=fp32"])
    torch._dynamo.reset()
    try:
        config, data = settle(config, tmp_path / "run")
        trainer = trainer_module.Trainer(config, tmp_path / "run", data=data)
        summary = trainer.fit()
    finally:
        torch._dynamo.reset()
    shapes = len(trainer.data.sampler.shapes())
    assert shapes == 3
    assert summary.compilation == CompilationCounts(graphs=shapes, recompiles=shapes - 1, graph_breaks=0,
                                                    cuda_graph_replays=0, cuda_graph_skips=0,
                                                    cuda_graph_non_static_inputs=0)


def test_more_threads_than_cores_is_refused_before_the_run_directory_is_touched(tmp_path, capsys) -> None:
    from vaswani.cli import main
    from vaswani.provenance import usable_cores

    cores = usable_cores()
    code = main(["train", "--preset", "smoke", "--run-dir", str(tmp_path / "run"),
                 "--set", f"train.num_threads={cores + 1}"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and err == (
        f"vaswani train: error: train.num_threads={cores + 1}: more than the {cores} core(s) this process "
        f"may use; give at most {cores}, or leave it unset (one thread per core)")
    assert not (tmp_path / "run").exists()  # no lock, no manifest
