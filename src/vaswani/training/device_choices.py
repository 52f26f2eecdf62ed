"""The choices of a training run that depend on the device, each a plain function of the device and the settings:
a CPU test checks each rule (tests/training/test_device_choices.py) and tests/gpu checks that CUDA follows it.

What a GPU changes is the price of the host waiting for the device. A CUDA kernel launch returns at once and the
device works through its queue while the host prepares the next kernels; any read of a device value on the host
(``.item()``, ``float(t)``, a boolean-mask index, whose result size the host must know) waits until the device
has finished everything queued before it, and the device then idles until the host launches again. On a CPU the
computation is the host's own work, so the same reads cost nothing.

:class:`CompilationWatch` counts what compiling did in a run (graphs, recompiles, CUDA-graph replays and skips):
whether a CUDA-graph run replayed its graphs is otherwise only a log line.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import torch
from torch.nn.parallel import DistributedDataParallel

from vaswani.devices import reuse_freed_memory
from vaswani.errors import ConfigError
from vaswani.provenance import usable_cores
from vaswani.training.config import TrainConfig
from vaswani.training.loss import TranslationLoss


def defers_host_reads(host_sync: str, device: torch.device) -> bool:
    """Whether each update's loss, gradient norm and finiteness stay on the device until a log step, an evaluation,
    a checkpoint or the end (``train.host_sync``): by default on CUDA, where reading them after every update would
    make the host wait for the device once per update. The device then skips a non-finite update itself
    (see training/step.py)."""
    if host_sync == "auto":
        return device.type == "cuda"
    return host_sync == "log-steps"


def loss_over_all_positions(device: torch.device, compiled: bool) -> bool:
    """Whether the training loss computes logits for every target position and masks the padding out, rather than
    gathering the real positions first. Gathering by a boolean mask skips the padded share of the largest matrix
    product, which a CPU pays for in full; but the gathered size depends on the data, so on CUDA the host waits to
    learn it, and a compiled graph breaks there."""
    return device.type == "cuda" or compiled


@dataclass(frozen=True)
class CompileOptions:
    """How ``torch.compile`` compiles the training module (:func:`compile_options`); None leaves torch's default."""

    dynamic: bool | None = None
    mode: str | None = None
    backend: str | None = None

    def arguments(self) -> dict[str, bool | str]:
        """The keyword arguments of ``torch.compile``."""
        return {name: value for name in ("dynamic", "mode", "backend") if (value := getattr(self, name)) is not None}


def compile_options(compile: bool, cuda_graphs: bool, device: torch.device, bucketed: bool) -> CompileOptions | None:
    """How ``torch.compile`` compiles the training module, or None to run it eagerly.

    - ``compile``: TorchInductor's generated kernels. With length buckets (``bucketed``) ``dynamic=False``: each
      batch shape gets a graph specialised to it, compiled once (:func:`recompile_limit` lets every shape have
      one); without buckets torch's default, which turns to shape-generic graphs after the first recompile.
    - ``cuda_graphs`` with ``compile``: mode "reduce-overhead", the compiled kernels recorded as a CUDA graph per
      shape and replayed with one launch.
    - ``cuda_graphs`` alone: backend "cudagraphs", the eager kernels traced once per shape and replayed as CUDA
      graphs: no kernel generation, so a new shape costs seconds rather than the minute Inductor may take.

    A CUDA graph replays fixed kernels on fixed addresses: it needs a CUDA device, fixed shapes and no host read
    inside (the loss over all positions, :func:`loss_over_all_positions`); dropout's random numbers are drawn on
    the device and advance with every replay.
    """
    if cuda_graphs and device.type != "cuda":
        raise ConfigError(f"train.cuda_graphs needs a CUDA device, and this run is on {device.type}; set "
                          "train.cuda_graphs=false", field="train.cuda_graphs")
    if not (compile or cuda_graphs):
        return None
    dynamic = False if bucketed else None
    if not cuda_graphs:
        return CompileOptions(dynamic)
    return CompileOptions(dynamic, mode="reduce-overhead") if compile else CompileOptions(dynamic, backend="cudagraphs")


def recompile_limit(shapes: int) -> int:
    """How many graphs torch.compile may make of one function before it gives up and runs it eagerly: one per
    batch shape, and room for the few that a change of mode (training, evaluation) adds."""
    return shapes + 8


def decoding_batches(device: torch.device) -> dict[str, int]:
    """The Translator's batch limits for validation BLEU and the final model's choice: sentences per batch and
    padded source positions × beams per batch. On a GPU a decoding step of a thousand sentences takes about as
    long as one of 64 (each step is a few small kernels per layer), so the whole validation split decodes in a
    few batches; 262,144 positions × beams keep the keys and values of a 512-wide, 6-layer decoder to a few GB.
    Elsewhere none: the Translator's own limits."""
    if device.type == "cuda":
        return {"batch_size": 1024, "max_tokens": 262_144}
    return {}


def check_threads(training: TrainConfig) -> None:
    """Refuse, in one line and before the run directory is touched, a ``train.num_threads`` above the cores
    this process may use: each thread is a pool thread with its own stack, so a count far past them ends
    inside the thread library (libgomp: out of memory) rather than training any faster."""
    cores = usable_cores()
    if training.num_threads is not None and training.num_threads > cores:
        raise ConfigError(f"train.num_threads={training.num_threads}: more than the {cores} core(s) this process "
                          f"may use; give at most {cores}, or leave it unset (one thread per core)",
                          field="train.num_threads")


def set_up_process(training: TrainConfig, device: torch.device) -> None:
    """The process-wide settings a run asks for: torch's CPU threads, keeping freed CPU memory for reuse
    (devices.reuse_freed_memory), deterministic algorithms."""
    if training.num_threads:
        torch.set_num_threads(training.num_threads)
    if device.type == "cpu" and training.reuse_freed_memory:
        reuse_freed_memory()
    if training.deterministic:
        torch.use_deterministic_algorithms(True)


def training_module(model: torch.nn.Module, training: TrainConfig, device: torch.device,
                    compiled: CompileOptions | None, distributed: bool, batch_shapes: int = 0) -> torch.nn.Module:
    """The module a training step calls: the model inside its loss (over all positions or the gathered ones, as
    :func:`loss_over_all_positions` chooses), compiled with ``compiled`` (:func:`compile_options`; None: eager) and
    wrapped by DDP on several ranks. ``batch_shapes``: how many shapes length buckets give the batches."""
    all_positions = loss_over_all_positions(device, compiled=compiled is not None)
    module: torch.nn.Module = TranslationLoss(model, training.label_smoothing, all_positions=all_positions)
    if compiled is not None:
        if batch_shapes:  # one graph per batch shape: none may fall back to eager for want of room
            limit = recompile_limit(batch_shapes)
            torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, limit)
        module = torch.compile(module, **compiled.arguments())
    if distributed:
        module = DistributedDataParallel(module, device_ids=[device.index] if device.type == "cuda" else None)
    return module


@dataclass(frozen=True)
class CompilationCounts:
    """What torch.compile and CUDA graphs did while a :class:`CompilationWatch` was open: a run summary's
    ``compilation``. With length buckets one graph per batch shape (and per mode, training or evaluation) is
    expected, every update after a shape's first two replays its CUDA graphs, and nothing is skipped."""

    graphs: int  # graphs Dynamo compiled
    recompiles: int  # compilations after the first: a new shape or mode each, or a guard that failed on something else
    graph_breaks: int
    cuda_graph_replays: int  # 0 with train.cuda_graphs: every call ran the eager kernels
    # functions the CUDA-graph backend ran eagerly instead of recording them (a CPU tensor, an input mutation): torch
    # logs only a performance hint, so a run that should replay says so here
    cuda_graph_skips: int
    # inputs copied into a recorded graph's own buffers at every replay, summed over the recorded graphs: a batch's
    # tensors each; hundreds would mean that the weights are copied too
    cuda_graph_non_static_inputs: int


def _process_counts() -> dict[str, int]:
    """Dynamo's and Inductor's counters: process-wide, since the process started."""
    from torch._dynamo.utils import counters

    return {"compilations": counters["frames"]["ok"], "graphs": counters["stats"]["unique_graphs"],
            "graph_breaks": sum(counters["graph_break"].values()),
            "cuda_graph_skips": counters["inductor"]["cudagraph_skips"],
            "cuda_graph_non_static_inputs": counters["inductor"]["cudagraph_recorded_non_static_inputs"]}


class CompilationWatch:
    """Counts what torch.compile and CUDA graphs do between entering and leaving it (:meth:`counts`).

    Dynamo and Inductor keep process-wide counters of graphs, recompiles, graph breaks and CUDA-graph skips; the
    watch reads their change. They do not count replays, so the watch counts the calls of
    ``torch.cuda.CUDAGraph.replay`` while it is open: a CUDA-graph run proves that its graphs replayed."""

    def __enter__(self) -> CompilationWatch:
        self._start, self._end = _process_counts(), None
        self._replays = 0
        self._replay = replay = torch.cuda.CUDAGraph.replay

        @functools.wraps(replay)
        def counted_replay(graph: torch.cuda.CUDAGraph, *args: Any, **kwargs: Any) -> Any:
            self._replays += 1
            return replay(graph, *args, **kwargs)

        torch.cuda.CUDAGraph.replay = counted_replay
        return self

    def __exit__(self, *exc_info: object) -> None:
        torch.cuda.CUDAGraph.replay = self._replay
        self._end = _process_counts()

    def counts(self) -> CompilationCounts:
        """What happened since the watch was entered, until it was left (or until now while it is open)."""
        end = self._end if self._end is not None else _process_counts()
        change = {key: end[key] - self._start[key] for key in end}
        return CompilationCounts(graphs=change["graphs"], recompiles=max(change["compilations"] - 1, 0),
                                 graph_breaks=change["graph_breaks"], cuda_graph_replays=self._replays,
                                 cuda_graph_skips=change["cuda_graph_skips"],
                                 cuda_graph_non_static_inputs=change["cuda_graph_non_static_inputs"])
