"""Feed-forward network, residual + LayerNorm wrapper (post-LN or pre-LN), and the encoder/decoder layers."""

from __future__ import annotations

from typing import Callable

import torch
import torch.nn as nn
import torch.nn.functional as F

from vaswani.config import ModelConfig
from vaswani.model.attention import MultiHeadAttention
from vaswani.model.dropout import Dropout
from vaswani.model.kv_cache import KVCache
from vaswani.model.positions import RotaryEmbedding


class FeedForward(nn.Module):
    """Position-wise FFN: Linear(d, d_ff) -> ReLU/GELU -> dropout -> Linear(d_ff, d)."""

    def __init__(self, d_model: int, d_ff: int, dropout: float, activation: str):
        super().__init__()
        self.up = nn.Linear(d_model, d_ff)
        self.down = nn.Linear(d_ff, d_model)
        self.activation = {"relu": F.relu, "gelu": F.gelu}[activation]
        self.dropout = Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(self.dropout(self.activation(self.up(x))))


class Residual(nn.Module):
    """x + dropout(sublayer(x)) with the LayerNorm either after the sum (post-LN, the paper) or before the
    sublayer (pre-LN, which keeps an identity path from input to output and trains without warmup)."""

    def __init__(self, d_model: int, dropout: float, norm: str):
        super().__init__()
        self.norm = nn.LayerNorm(d_model)
        self.dropout = Dropout(dropout)
        self.pre_norm = norm == "pre"

    def forward(self, x: torch.Tensor, sublayer: Callable[[torch.Tensor], torch.Tensor]) -> torch.Tensor:
        if self.pre_norm:
            return x + self.dropout(sublayer(self.norm(x)))
        return self.norm(x + self.dropout(sublayer(x)))


class EncoderLayer(nn.Module):
    def __init__(self, config: ModelConfig, rotary: RotaryEmbedding | None):
        super().__init__()
        d, p, attn_p = config.d_model, config.dropout, config.attention_dropout
        self.self_attn = MultiHeadAttention(d, config.n_heads, attn_p, config.attention, rotary=rotary,
                                            window=config.sliding_window)
        self.ffn = FeedForward(d, config.d_ff, p, config.activation)
        self.attn_block = Residual(d, p, config.norm)
        self.ffn_block = Residual(d, p, config.norm)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        """``mask``: the source's padding mask (B, 1, 1, S); a sliding window is the attention module's own."""
        x = self.attn_block(x, lambda h: self.self_attn(h, mask=mask))
        return self.ffn_block(x, self.ffn)


class DecoderLayer(nn.Module):
    """Causal self-attention, cross-attention over the encoder output, feed-forward.

    Self-attention needs no mask: causality is ``is_causal``, a sliding window the attention module's own, and
    padded target positions only follow real ones, so causality hides them (the loss ignores them)."""

    def __init__(self, config: ModelConfig, rotary: RotaryEmbedding | None):
        super().__init__()
        d, p, attn_p = config.d_model, config.dropout, config.attention_dropout
        self.self_attn = MultiHeadAttention(
            d, config.n_heads, attn_p, config.attention, rotary=rotary, window=config.sliding_window
        )
        self.cross_attn = MultiHeadAttention(d, config.n_heads, attn_p, config.attention, cross=True)
        self.ffn = FeedForward(d, config.d_ff, p, config.activation)
        self.self_block = Residual(d, p, config.norm)
        self.cross_block = Residual(d, p, config.norm)
        self.ffn_block = Residual(d, p, config.norm)

    def forward(
        self,
        x: torch.Tensor,
        memory: torch.Tensor | KVCache,
        memory_mask: torch.Tensor | None,
        cache: KVCache | None = None,
        position_offset: int = 0,
    ) -> torch.Tensor:
        """x (B, T, D) -> (B, T, D). ``memory``: the encoder output or its cross-attention keys/values.
        Decoding step by step: ``cache`` holds this layer's self-attention keys/values so far (extended in place)
        and ``position_offset`` is the position of x's first token."""
        x = self.self_block(
            x, lambda h: self.self_attn(h, is_causal=True, cache=cache, position_offset=position_offset))
        x = self.cross_block(x, lambda h: self.cross_attn(h, context=memory, mask=memory_mask))
        return self.ffn_block(x, self.ffn)
