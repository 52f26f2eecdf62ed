"""Multi-head attention (the paper's §3.2): scaled dot-product attention written out, the same formula through
PyTorch's fused kernels, and the module that projects queries, keys and values into heads.

- ``standard``: softmax(Q Kᵀ / √d_k) V written out, the reference the experiments compare against. It
  materialises the (B, H, Q, K) score matrix, so its memory grows with the square of the length.
- ``sdpa``: ``F.scaled_dot_product_attention``, which dispatches to FlashAttention / memory-efficient kernels
  on GPU (and a fused kernel on CPU) and never materialises the scores when it can avoid it. Which kernels it may
  use is decided per call (``kernels.py``).

Both take the project's mask convention (``masks.py``: boolean, True = may attend) plus an ``is_causal`` flag.
Causal self-attention without any other mask is passed to SDPA as ``is_causal=True`` so that the flash kernel
(which does not accept an explicit mask) is eligible. A sliding window (``window.py``) and the key/value cache of
incremental decoding (``kv_cache.py``) have files of their own.
"""

from __future__ import annotations

import math
from typing import Callable

import torch
import torch.nn as nn
import torch.nn.functional as F

from vaswani.model.kernels import allowed_kernels
from vaswani.model.kv_cache import KVCache
from vaswani.model.masks import causal_mask, guard_fully_masked_rows, sliding_window_mask
from vaswani.model.positions import RotaryEmbedding
from vaswani.model.window import windowed_attention

AttentionFunction = Callable[..., torch.Tensor]


def attention_weights(q: torch.Tensor, k: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    """softmax(q kᵀ / √d) over the allowed keys: the (B, H, Q, K) weights the standard backend multiplies v by
    (also what the server's heatmap shows; the fused backend never materialises them)."""
    scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(q.size(-1)))  # (B, H, Q, K)
    if mask is not None:
        # The most negative *finite* value of the score dtype: -inf would turn a fully masked row into NaN,
        # and a fixed constant like -1e9 overflows in fp16.
        scores = scores.masked_fill(~guard_fully_masked_rows(mask), torch.finfo(scores.dtype).min)
    return torch.softmax(scores, dim=-1, dtype=torch.float32)


def standard_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    mask: torch.Tensor | None = None,
    is_causal: bool = False,
    dropout_p: float = 0.0,
) -> torch.Tensor:
    """softmax(q kᵀ / √d) v. q: (B, H, Q, d), k/v: (B, H, K, d), mask broadcastable to (B, H, Q, K)."""
    # With fewer queries than keys the queries are the *last* positions (a decoding step). A single one sees every
    # key, so it needs no mask: building a (K, K) triangle to keep its last row would be pure overhead per step.
    if is_causal and q.size(-2) > 1:
        causal = causal_mask(k.size(-2), device=q.device)[..., -q.size(-2) :, :]
        mask = causal if mask is None else mask & causal
    weights = attention_weights(q, k, mask).to(v.dtype)
    if dropout_p > 0.0:
        weights = F.dropout(weights, p=dropout_p)
    return weights @ v  # (B, H, Q, d)


def sdpa_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    mask: torch.Tensor | None = None,
    is_causal: bool = False,
    dropout_p: float = 0.0,
) -> torch.Tensor:
    """The same function through PyTorch's fused kernels, those ``kernels.allowed_kernels`` allows."""
    if mask is not None:
        if is_causal:  # SDPA accepts either an explicit mask or is_causal, not both
            mask = mask & causal_mask(k.size(-2), device=q.device)[..., -q.size(-2) :, :]
        mask = guard_fully_masked_rows(mask)
        causal = False
    else:
        # is_causal in SDPA aligns the triangle to the top-left corner; with fewer queries than keys (a decoding
        # step) the query is the *last* position and sees every key, so no mask is needed at all.
        # (A single query is tested first: under torch.compile it is a plain int, the key count a symbolic one.)
        causal = is_causal and q.size(-2) > 1 and q.size(-2) == k.size(-2)
    with allowed_kernels(q, masked=mask is not None):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout_p, is_causal=causal)


BACKENDS: dict[str, AttentionFunction] = {"standard": standard_attention, "sdpa": sdpa_attention}


class MultiHeadAttention(nn.Module):
    """Multi-head attention used three ways: encoder self-attention, causal decoder self-attention, cross-attention.

    Self-attention projects Q, K, V with one fused matrix; cross-attention projects Q from the decoder and K, V from
    the encoder output (``context``) — the K, V part is separate so it can be computed once per source.
    """

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        dropout: float,
        backend: str,
        cross: bool = False,
        rotary: RotaryEmbedding | None = None,
        window: int | None = None,
    ):
        super().__init__()
        if backend not in BACKENDS:
            raise ValueError(f"unknown attention backend {backend!r}; choose from {sorted(BACKENDS)}")
        self.n_heads, self.head_dim = n_heads, d_model // n_heads
        self.cross = cross
        self.backend = backend
        self.dropout = dropout
        self.rotary = rotary
        # Self-attention only: enforced by windowed_attention in full passes, by the cache's ring when decoding
        # step by step.
        self.window = window
        if cross:
            self.q_proj = nn.Linear(d_model, d_model)
            self.kv_proj = nn.Linear(d_model, 2 * d_model)
        else:
            self.qkv_proj = nn.Linear(d_model, 3 * d_model)
        self.out_proj = nn.Linear(d_model, d_model)

    def _split_heads(self, x: torch.Tensor) -> torch.Tensor:  # (B, T, D) -> (B, H, T, d)
        return x.unflatten(-1, (self.n_heads, self.head_dim)).transpose(1, 2)

    def project_context(self, context: torch.Tensor) -> KVCache:
        """Cross-attention keys and values of the encoder output: compute once, reuse at every decoding step."""
        k, v = self.kv_proj(context).chunk(2, dim=-1)
        # Contiguous (B, H, S, d), the layout a reordered cache has too: every decoding step then reads keys and
        # values of one memory layout (one compiled graph, not one per layout).
        return KVCache(self._split_heads(k).contiguous(), self._split_heads(v).contiguous())

    def _queries_keys_values(
        self,
        x: torch.Tensor,
        context: torch.Tensor | KVCache | None,
        cache: KVCache | None,
        position_offset: int,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """q (B, H, T, d) of the queries ``x``; k, v (B, H, K, d) of what they attend to."""
        if self.cross:
            kv = context if isinstance(context, KVCache) else self.project_context(context)
            return self._split_heads(self.q_proj(x)), kv.k, kv.v
        q, k, v = (self._split_heads(t) for t in self.qkv_proj(x).chunk(3, dim=-1))
        if self.rotary is not None:
            q = self.rotary(q, position_offset)
            k = self.rotary(k, position_offset)
        if cache is None:
            return q, k, v
        # A causal sliding window never looks further back than `window` keys (itself included): the cache keeps
        # only those (see KVCache), which enforces the window and bounds decoding memory.
        cache.append(k, v)
        return q, cache.k, cache.v

    def forward(
        self,
        x: torch.Tensor,
        context: torch.Tensor | KVCache | None = None,
        mask: torch.Tensor | None = None,
        is_causal: bool = False,
        cache: KVCache | None = None,
        position_offset: int = 0,
    ) -> torch.Tensor:
        """x: (B, T, D) queries -> (B, T, D).

        Cross-attention: ``context`` is the encoder output (B, S, D) or its precomputed KVCache.
        Incremental self-attention: ``cache`` holds the keys/values of the positions before x (empty at the first
        step) and ``position_offset`` is the absolute position of x's first token; x's keys/values are appended
        to the cache in place.
        """
        q, k, v = self._queries_keys_values(x, context, cache, position_offset)
        attend = BACKENDS[self.backend]
        dropout_p = self.dropout if self.training else 0.0
        if self.window is not None and not self.cross and cache is None:
            out = windowed_attention(q, k, v, self.window, is_causal, key_padding=mask, attend=attend,
                                     dropout_p=dropout_p)
        else:
            out = attend(q, k, v, mask=mask, is_causal=is_causal, dropout_p=dropout_p)
        return self.out_proj(out.transpose(1, 2).flatten(-2))  # heads concatenated: (B, T, D)

    def attention_weights(
        self,
        x: torch.Tensor,
        context: torch.Tensor | KVCache | None = None,
        mask: torch.Tensor | None = None,
        is_causal: bool = False,
    ) -> torch.Tensor:
        """(B, H, T, K) weights that :meth:`forward` with the same arguments (a full pass, no cache) multiplies
        the values by, computed with the plain formula (:func:`attention_weights`) whatever the backend."""
        q, k, _ = self._queries_keys_values(x, context, None, 0)
        if self.window is not None and not self.cross:
            allowed = sliding_window_mask(q.size(-2), k.size(-2), self.window, is_causal, device=q.device)
        elif is_causal:
            allowed = causal_mask(k.size(-2), device=q.device)[..., -q.size(-2) :, :]
        else:
            allowed = None
        if allowed is not None:
            mask = allowed if mask is None else mask & allowed
        return attention_weights(q, k, mask)
