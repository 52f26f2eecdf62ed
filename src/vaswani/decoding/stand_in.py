"""The base of every stand-in for a Transformer in a search (the uncached reference, the compiled step): the model
behind it, its config, its train/eval mode passed through, and by default the model's own incremental decoding — a
subclass overrides only the step it changes."""

from __future__ import annotations

from typing import Any

import torch

from vaswani.model.transformer import Transformer


class TransformerStandIn:
    def __init__(self, model: Transformer):
        self.model = model
        self.config = model.config

    @property
    def training(self) -> bool:
        return self.model.training

    def eval(self) -> "TransformerStandIn":
        self.model.eval()
        return self

    def train(self, mode: bool = True) -> "TransformerStandIn":
        self.model.train(mode)
        return self

    def start_decoding(self, src: torch.Tensor, capacity: int | None = None) -> Any:
        return self.model.start_decoding(src, capacity)

    def decode_step(self, tokens: torch.Tensor, state: Any) -> torch.Tensor:
        return self.model.decode_step(tokens, state)
