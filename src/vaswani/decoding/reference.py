"""Decoding without a key/value cache: the slow, obviously correct reference the cached search is checked against.

:class:`UncachedModel` offers the same ``start_decoding`` / ``decode_step`` interface as the Transformer, but each
step runs the full model on the whole prefix, ``model(src, prefix)[:, -1]`` (only the last position is projected
to the vocabulary — the other positions' logits would be thrown away). Passed to :func:`generate`, it yields the
same tokens as the cached model: that equality is what proves the cache right, and the time difference is what
the cache buys (``vaswani bench decode``).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from vaswani.decoding.delegating_model import DelegatingModel
from vaswani.model.transformer import Transformer


@dataclass
class PrefixState:
    src: torch.Tensor  # (N, S) source ids, repeated per hypothesis
    prefix: torch.Tensor  # (N, t) <s> y1 … fed so far
    memory: torch.Tensor | None  # (N, S, D) encoder output when it is kept, else None (recomputed every step)
    memory_mask: torch.Tensor | None  # (N, 1, 1, S)
    step: int = 0

    def reorder(self, index: torch.Tensor) -> "PrefixState":
        pick = lambda t: None if t is None else t.index_select(0, index)  # noqa: E731
        return PrefixState(pick(self.src), pick(self.prefix), pick(self.memory), pick(self.memory_mask), self.step)

    def reorder_beams(self, rows: torch.Tensor, sentences: torch.Tensor | None) -> "PrefixState":
        return self.reorder(rows)  # the obviously correct reorder: every tensor, every step


class UncachedModel(DelegatingModel):
    """Wrap a Transformer so every decoding step recomputes the whole prefix.

    ``reencode=True`` (the default) also reruns the encoder every step, exactly ``model(src, prefix)``;
    ``reencode=False`` keeps the encoder output and recomputes only the decoder, which isolates what the
    decoder's self-attention cache saves.
    """

    def __init__(self, model: Transformer, reencode: bool = True):
        super().__init__(model)
        self.reencode = reencode

    def start_decoding(self, src: torch.Tensor, capacity: int | None = None) -> PrefixState:
        prefix = src.new_empty(src.size(0), 0)
        if self.reencode:
            return PrefixState(src, prefix, None, None)
        memory, memory_mask = self.model.encode(src)
        return PrefixState(src, prefix, memory, memory_mask)

    def decode_step(self, tokens: torch.Tensor, state: PrefixState) -> torch.Tensor:
        """tokens (N,) -> logits (N, V) of the next token, from a full pass over <s> … tokens."""
        state.prefix = torch.cat((state.prefix, tokens[:, None]), dim=1)  # (N, t + 1)
        memory, memory_mask = state.memory, state.memory_mask
        if memory is None:
            memory, memory_mask = self.model.encode(state.src)
        hidden = self.model.decode(state.prefix, memory, memory_mask)  # (N, t + 1, D)
        state.step += 1
        return self.model.project(hidden[:, -1])

