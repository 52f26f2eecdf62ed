"""The base of every object a search runs in place of a Transformer (the uncached reference, the compiled step): it
delegates to the model behind it (its config, its train/eval mode and by default its own incremental decoding), and
a subclass overrides only the step it changes."""

from __future__ import annotations

from typing import Any

import torch

from vaswani.model.transformer import Transformer


class DelegatingModel:
    def __init__(self, model: Transformer):
        self.model = model
        self.config = model.config

    @property
    def training(self) -> bool:
        return self.model.training

    def eval(self) -> "DelegatingModel":
        self.model.eval()
        return self

    def train(self, mode: bool = True) -> "DelegatingModel":
        self.model.train(mode)
        return self

    def start_decoding(self, src: torch.Tensor, capacity: int | None = None) -> Any:
        return self.model.start_decoding(src, capacity)

    def decode_step(self, tokens: torch.Tensor, state: Any) -> torch.Tensor:
        return self.model.decode_step(tokens, state)
