"""Text classifier: the project's own Transformer encoder, a pooling step, and a linear head.

Shapes: B batch, S sequence length, D d_model, C classes.

    model = TransformerClassifier(ModelConfig.preset("tiny"), n_classes=2, pooling="mean")
    logits = model(ids)          # ids (B, S) = <s> tokens </s> <pad>…  ->  (B, C)

The input starts with ``<s>``, which plays BERT's ``[CLS]``: with ``pooling="cls"`` the head reads that position's
state, which self-attention can fill with whatever the task needs. ``pooling="mean"`` averages the states of the
real (non-padding) tokens instead; on small data sets it is usually the easier one to train, because every token
gets gradient from the loss directly.
"""

from __future__ import annotations

from typing import Literal

import torch
import torch.nn as nn

from vaswani.config import ModelConfig
from vaswani.model.transformer import Encoder, token_embedding

Pooling = Literal["cls", "mean"]
POOLINGS: tuple[str, ...] = ("cls", "mean")


class TransformerClassifier(nn.Module):
    def __init__(self, config: ModelConfig, n_classes: int, pooling: Pooling = "cls"):
        super().__init__()
        if pooling not in POOLINGS:
            raise ValueError(f"unknown pooling {pooling!r}; choose from {list(POOLINGS)}")
        if n_classes < 2:
            raise ValueError(f"a classifier needs at least 2 classes, got {n_classes}")
        self.config = config
        self.n_classes = n_classes
        self.pooling = pooling
        self.encoder = Encoder(config, token_embedding(config))
        self.dropout = nn.Dropout(config.dropout)
        self.head = nn.Linear(config.d_model, n_classes)
        # Xavier-uniform for every projection, as the translation model does; zero biases.
        for module in self.modules():
            if isinstance(module, nn.Linear):
                nn.init.xavier_uniform_(module.weight)
                nn.init.zeros_(module.bias)

    def pool(self, states: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
        """(B, S, D) encoder states -> (B, D) one vector per text."""
        if self.pooling == "cls":
            return states[:, 0]
        real = (ids != self.config.pad_id).unsqueeze(-1).to(states.dtype)  # (B, S, 1)
        # clamp: a row of padding only (never produced by our batching) would otherwise divide by zero
        return (states * real).sum(dim=1) / real.sum(dim=1).clamp(min=1.0)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:  # (B, S) -> (B, C) logits
        states = self.encoder(ids)
        return self.head(self.dropout(self.pool(states, ids)))

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters() if p.requires_grad)


__all__ = ["TransformerClassifier", "Pooling", "POOLINGS"]
