"""The Transformer of "Attention Is All You Need", one concept per module: masks, positions, attention (with its
kernel policy, sliding window and key/value cache beside it), dropout, blocks (FFN, residual/norm, layers),
transformer (embeddings, encoder, decoder).

docs/architecture.md maps each section of the paper to the function here that implements it.

Names are imported on first use, so reading a checkpoint's files (``vaswani.model.serialization``) does not import
torch: a translation on the CTranslate2 engine never needs it.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

_EXPORTS = {
    "MultiHeadAttention": "attention", "sdpa_attention": "attention", "standard_attention": "attention",
    "KVCache": "kv_cache",
    "Dropout": "dropout", "dropout": "dropout",
    "causal_mask": "masks", "padding_mask": "masks", "sliding_window_mask": "masks",
    "LearnedPositions": "positions", "RotaryEmbedding": "positions", "SinusoidalPositions": "positions",
    "sinusoidal_table": "positions",
    "Decoder": "transformer", "DecoderState": "transformer", "Encoder": "transformer", "Transformer": "transformer",
}

__all__ = [
    "Transformer", "Encoder", "Decoder", "DecoderState", "MultiHeadAttention", "KVCache",
    "standard_attention", "sdpa_attention", "Dropout", "dropout",
    "padding_mask", "causal_mask", "sliding_window_mask",
    "SinusoidalPositions", "LearnedPositions", "RotaryEmbedding", "sinusoidal_table",
]


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(import_module(f"vaswani.model.{_EXPORTS[name]}"), name)
    raise AttributeError(f"module 'vaswani.model' has no attribute {name!r}")
