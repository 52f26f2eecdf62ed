"""The Transformer of "Attention Is All You Need", one concept per module: masks, positions, attention,
dropout, blocks (FFN, residual/norm, layers), transformer (embeddings, encoder, decoder).

docs/architecture.md maps each section of the paper to the function here that implements it."""

from vaswani.model.attention import KVCache, MultiHeadAttention, sdpa_attention, standard_attention
from vaswani.model.dropout import Dropout, dropout
from vaswani.model.masks import causal_mask, padding_mask, sliding_window_mask
from vaswani.model.positions import LearnedPositions, RotaryEmbedding, SinusoidalPositions, sinusoidal_table
from vaswani.model.transformer import Decoder, DecoderState, Encoder, Transformer

__all__ = [
    "Transformer", "Encoder", "Decoder", "DecoderState", "MultiHeadAttention", "KVCache",
    "standard_attention", "sdpa_attention", "Dropout", "dropout",
    "padding_mask", "causal_mask", "sliding_window_mask",
    "SinusoidalPositions", "LearnedPositions", "RotaryEmbedding", "sinusoidal_table",
]
