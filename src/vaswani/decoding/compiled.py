"""A decoding step compiled with ``torch.compile``: the same search, fewer and fused kernels per step.

:class:`CompiledDecoder` wraps a :class:`~vaswani.model.Transformer` in the incremental-decoding interface that
:func:`~vaswani.decoding.search.generate` drives (``start_decoding`` / ``decode_step`` / ``state.reorder``) and
runs ``decode_step`` through ``torch.compile(dynamic=True)``: one graph serves every batch size, source length
and position, so it compiles once per model and process (twice if the first compiled batch happens to have as
many rows as the model has heads: torch.compile then ties the two sizes together), and inductor's on-disk cache
makes later processes faster to start. What keeps it to one graph is in the model: self-attention caches
of one memory layout at every step (grown ones are always contiguous, preallocated ones keep a spare slot),
contiguous cross-attention keys, no size-dependent Python branches in a step. The search's bookkeeping (top-k,
reorders) and the encoder stay eager: they are data-dependent or run once per batch.

torch.compile keeps at most ``torch._dynamo.config.recompile_limit`` (8) graphs per function: a process that
compiles the step of many different models falls back to eager for the later ones (with torch's warning).

What it costs and buys is measured by ``vaswani bench decode --compile`` (``results/bench/``): the compile takes
tens of seconds on a 2-core CPU, so it pays off for long files and long-lived processes, not for one test set.
"""

from __future__ import annotations

import shutil
from typing import Callable

import torch

from vaswani.decoding.delegating_model import DelegatingModel
from vaswani.errors import VaswaniError
from vaswani.model.transformer import DecoderState, Transformer

# torch.compile specialises sizes 0 and 1 into graphs of their own. The first two steps (an empty, unallocated
# cache, then one of 1 position) and a batch of one sentence would each compile a whole graph for a step taken once
# per batch, so those steps run eagerly; every other step shares one graph.
FIRST_COMPILED_STEP = 2
SMALLEST_COMPILED_BATCH = 2


def require_cpp_compiler(device: torch.device) -> None:
    """torch.compile's CPU code generator builds C++: say so in one line instead of failing mid-translation."""
    if device.type == "cpu" and not any(shutil.which(name) for name in ("g++", "c++", "clang++")):
        raise VaswaniError("`compile` on a CPU needs a C++ compiler (g++ or clang++) for torch.compile; "
                           "install one (e.g. apt-get install g++) or leave out `compile`")


class CompiledDecoder(DelegatingModel):
    """``model`` with its decoding step compiled; searched exactly like the model itself.

    ``backend`` is torch.compile's ("inductor" generates fused kernels; "aot_eager" only traces, which tests use
    to check the traced step quickly).
    """

    def __init__(self, model: Transformer, backend: str | Callable = "inductor"):
        if backend == "inductor":
            require_cpp_compiler(next(model.parameters()).device)
        super().__init__(model)
        self.compiled_step = torch.compile(model.decode_step, dynamic=True, backend=backend)

    def decode_step(self, tokens: torch.Tensor, state: DecoderState) -> torch.Tensor:
        if state.step < FIRST_COMPILED_STEP or tokens.size(0) < SMALLEST_COMPILED_BATCH:
            return self.model.decode_step(tokens, state)
        return self.compiled_step(tokens, state)

