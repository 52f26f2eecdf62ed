"""The choices of a training run that depend on the device, each a plain function of the device and the settings:
a CPU test checks each rule (tests/training/test_device_choices.py) and tests/gpu checks that CUDA follows it.

What a GPU changes is the price of the host waiting for the device. A CUDA kernel launch returns at once and the
device works through its queue while the host prepares the next kernels; any read of a device value on the host
(``.item()``, ``float(t)``, a boolean-mask index, whose result size the host must know) waits until the device
has finished everything queued before it, and the device then idles until the host launches again. On a CPU the
computation is the host's own work, so the same reads cost nothing.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.nn.parallel import DistributedDataParallel

from vaswani.devices import reuse_freed_memory
from vaswani.errors import ConfigError
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


def compile_options(compile: bool, cuda_graphs: bool, device: torch.device, bucketed: bool) -> dict[str, Any] | None:
    """The keyword arguments of ``torch.compile`` for the training module, or None to run it eagerly.

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
    options: dict[str, Any] = {"dynamic": False} if bucketed else {}
    if cuda_graphs:
        options.update({"mode": "reduce-overhead"} if compile else {"backend": "cudagraphs"})
    return options


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


def set_up_process(tc: TrainConfig, device: torch.device) -> None:
    """The process-wide settings a run asks for: torch's CPU threads, keeping freed CPU memory for reuse
    (devices.reuse_freed_memory), deterministic algorithms."""
    if tc.num_threads:
        torch.set_num_threads(tc.num_threads)
    if device.type == "cpu" and tc.reuse_freed_memory:
        reuse_freed_memory()
    if tc.deterministic:
        torch.use_deterministic_algorithms(True)


def training_module(model: torch.nn.Module, tc: TrainConfig, device: torch.device, compiled: dict[str, Any] | None,
                    distributed: bool, batch_shapes: int = 0) -> torch.nn.Module:
    """The module a training step calls: the model inside its loss (over all positions or the gathered ones, as
    :func:`loss_over_all_positions` chooses), compiled with ``compiled`` (:func:`compile_options`; None: eager) and
    wrapped by DDP on several ranks. ``batch_shapes``: how many shapes length buckets give the batches."""
    all_positions = loss_over_all_positions(device, compiled=compiled is not None)
    module: torch.nn.Module = TranslationLoss(model, tc.label_smoothing, all_positions=all_positions)
    if compiled is not None:
        if batch_shapes:  # one graph per batch shape: none may fall back to eager for want of room
            limit = recompile_limit(batch_shapes)
            torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, limit)
        module = torch.compile(module, **compiled)
    if distributed:
        module = DistributedDataParallel(module, device_ids=[device.index] if device.type == "cuda" else None)
    return module
