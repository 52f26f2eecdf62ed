"""Multi-head attention with two interchangeable backends, a sliding window in O(T·k) memory, and a key/value
cache for incremental decoding.

- ``standard``: softmax(Q Kᵀ / √d_k) V written out, the reference the experiments compare against. It
  materialises the (B, H, Q, K) score matrix, so its memory grows with the square of the length.
- ``sdpa``: ``F.scaled_dot_product_attention``, which dispatches to FlashAttention / memory-efficient kernels
  on GPU (and a fused kernel on CPU) and never materialises the scores when it can avoid it. Which GPU kernels
  it may use is decided per call by :func:`sdpa_backends`.

Both take the project's mask convention (``masks.py``: boolean, True = may attend) plus an ``is_causal`` flag.
Causal self-attention without any other mask is passed to SDPA as ``is_causal=True`` so that the flash kernel
(which does not accept an explicit mask) is eligible.

A sliding window of k keys (:func:`windowed_attention`) cuts the queries into blocks and gives each block only the
keys its window can reach, so no (T, T) mask or score matrix exists: memory grows with T·k, not T².
"""

from __future__ import annotations

import contextlib
import math
from typing import Callable

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from vaswani.model.masks import causal_mask, guard_fully_masked_rows, sliding_window_mask
from vaswani.model.positions import RotaryEmbedding

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


FLASH_HEAD_DIMS = range(8, 257, 8)  # head sizes FlashAttention takes


def sdpa_backends(device_type: str, dtype: torch.dtype, head_dim: int, masked: bool) -> list[SDPBackend] | None:
    """The kernels one SDPA call may use on this device, best first; None leaves the choice to PyTorch.

    On CUDA: FlashAttention where it applies (fp16/bf16, no explicit mask — causality goes as ``is_causal`` —
    and a head size it takes), else the memory-efficient kernel (fp32, padding or window masks). Never cuDNN
    attention, which PyTorch prefers on Hopper GPUs: it builds an execution plan for every new sequence length,
    and with batches of varying length that is a new plan almost every batch (on an H100: 2.7 ms of host time
    per call, a whole training run 2.6× slower than without it). The math path comes last, for inputs neither
    fused kernel takes: they run slowly rather than fail. On a CPU PyTorch's own choice is right: its fused CPU
    kernel, or the math path where that kernel cannot take the call (attention dropout).
    """
    if device_type != "cuda":
        return None
    flash = dtype in (torch.float16, torch.bfloat16) and not masked and head_dim in FLASH_HEAD_DIMS
    first = [SDPBackend.FLASH_ATTENTION] if flash else []
    return [*first, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH]


def sdpa_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    mask: torch.Tensor | None = None,
    is_causal: bool = False,
    dropout_p: float = 0.0,
) -> torch.Tensor:
    """The same function through PyTorch's fused kernels, chosen by :func:`sdpa_backends`."""
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
    backends = sdpa_backends(q.device.type, q.dtype, q.size(-1), masked=mask is not None)
    with sdpa_kernel(backends, set_priority=True) if backends else contextlib.nullcontext():
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout_p, is_causal=causal)


BACKENDS: dict[str, AttentionFunction] = {"standard": standard_attention, "sdpa": sdpa_attention}


def window_block(window: int) -> int:
    """Queries per block of :func:`windowed_attention`: the window itself (each block then reads about 2k keys,
    so memory is O(T·k)), but at least 32 so that short windows do not cost one kernel launch per few queries."""
    return max(window, 32)


def windowed_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    window: int,
    causal: bool,
    key_padding: torch.Tensor | None = None,
    attend: AttentionFunction = standard_attention,
    dropout_p: float = 0.0,
) -> torch.Tensor:
    """Self-attention through a sliding window of ``window`` keys, in O(T·k) memory; equal to ``attend`` with the
    full ``sliding_window_mask`` (and causal mask) on every query that has a key to attend to.

    q/k/v: (B, H, T, d), the same T. ``key_padding``: (B, 1, 1, T) mask of real keys, or None. Causal: query i sees
    keys i-k+1 .. i; bidirectional: |i - j| <= k // 2 (``masks.sliding_window_mask``). The queries are cut into
    blocks of c = :func:`window_block` (k); block b reads only keys bc - left .. bc + c + right, where ``left`` and
    ``right`` are how far the window reaches back and ahead, so every block attends to c + left + right keys
    through one ``attend`` call over all blocks at once (the blocks become batch rows). Sequences no longer than
    that span gain nothing from blocks and take the full (T, T) band mask instead.
    """
    batch, heads, length, head_dim = q.shape
    left, right = (window - 1, 0) if causal else (window // 2, window // 2)
    block = window_block(window)
    span = block + left + right
    if length <= span:
        mask = sliding_window_mask(length, length, window, causal, device=q.device)
        return attend(q, k, v, mask=mask if key_padding is None else mask & key_padding, dropout_p=dropout_p)
    blocks = -(-length // block)
    extra = blocks * block - length  # queries added to fill the last block

    def key_blocks(x: torch.Tensor) -> torch.Tensor:  # (B, H, T, d) -> (B·blocks, H, span, d)
        padded = F.pad(x, (0, 0, left, extra + right))
        windows = padded.unfold(2, span, block).transpose(-1, -2)  # (B, H, blocks, span, d), a view
        return windows.transpose(1, 2).reshape(batch * blocks, heads, span, head_dim)

    query_blocks = F.pad(q, (0, 0, 0, extra)).reshape(batch, heads, blocks, block, head_dim)
    query_blocks = query_blocks.transpose(1, 2).reshape(batch * blocks, heads, block, head_dim)
    real = torch.ones(batch, length, dtype=torch.bool, device=q.device) if key_padding is None else (
        key_padding.reshape(batch, length))
    real = F.pad(real, (left, extra + right)).unfold(1, span, block)  # (B, blocks, span): keys inside the sequence
    band = sliding_window_mask(block, span, window, causal, query_offset=left, device=q.device)[0]  # (1, c, span)
    mask = (band & real[:, :, None, :]).reshape(batch * blocks, 1, block, span)
    out = attend(query_blocks, key_blocks(k), key_blocks(v), mask=mask, dropout_p=dropout_p)
    out = out.view(batch, blocks, heads, block, head_dim).transpose(1, 2).reshape(batch, heads, -1, head_dim)
    return out[:, :, :length]


class KVCache:
    """Keys and values of one attention module, (B, H, T, head_dim) each: ``cache.k``, ``cache.v``.

    Cross-attention caches are computed once and never change. A decoder self-attention cache grows by one
    position per step. With a ``capacity`` it is a preallocated buffer with room for that many positions:
    :meth:`append` writes a step's keys/values in place instead of copying the whole cache into a new tensor.
    Without one it grows exactly as needed, i.e. one copy per step — the search's default, because on a CPU with
    short outputs the copy is cheap and a beam reorder then copies only the filled positions
    (``vaswani bench decode`` times both; ``search.preallocate_cache`` picks). With a sliding ``window`` the
    buffer is a ring of ``window`` slots: attention without a mask does not depend on the order of its keys (RoPE
    rotates them before they are cached), so the newest key may overwrite the oldest in place.
    """

    def __init__(self, k: torch.Tensor | None, v: torch.Tensor | None, length: int | None = None,
                 capacity: int | None = None, window: int | None = None):
        self._k, self._v = k, v  # buffers (B, H, slots, head_dim); None until the first append
        self.length = (k.size(2) if k is not None else 0) if length is None else length  # positions seen so far
        self.capacity = capacity  # slots to allocate up front; None: grow exactly as needed
        self.window = window

    @classmethod
    def empty(cls, capacity: int | None = None, window: int | None = None) -> "KVCache":
        """A self-attention cache to fill step by step (allocated on the first append, in the keys' dtype)."""
        if window is not None and capacity is not None:
            capacity = min(capacity, window)
        return cls(None, None, 0, capacity=capacity, window=window)

    @property
    def filled(self) -> int:
        """Valid slots: every position seen so far, or the last ``window`` of them."""
        return self.length if self.window is None else min(self.length, self.window)

    @property
    def k(self) -> torch.Tensor:
        return self._k[:, :, : self.filled]

    @property
    def v(self) -> torch.Tensor:
        return self._v[:, :, : self.filled]

    def append(self, k: torch.Tensor, v: torch.Tensor) -> None:
        """Add the keys/values (B, H, t, head_dim) of the next t positions, in place."""
        t = k.size(2)
        if self.window is not None:  # ring buffer: position p lives in slot p mod window
            k, v = k[:, :, -self.window :], v[:, :, -self.window :]
            self._reserve(self.window if self.capacity else min(self.window, self.length + t), k)
            slots = torch.arange(self.length + t - k.size(2), self.length + t, device=k.device) % self._k.size(2)
            self._k.index_copy_(2, slots, k)
            self._v.index_copy_(2, slots, v)
        else:
            self._reserve(self.length + t, k)
            self._k[:, :, self.length : self.length + t] = k
            self._v[:, :, self.length : self.length + t] = v
        self.length += t

    def _reserve(self, slots: int, like: torch.Tensor) -> None:
        """Make the buffers at least ``slots`` long: the capacity (or double) when preallocating, else exactly."""
        current = 0 if self._k is None else self._k.size(2)
        if slots <= current:
            return
        if self.capacity is not None:
            # One slot more than the search needs (a ring's slots are all used by design): the buffer never
            # fills, so the valid keys are a strict slice of it at every step — one memory layout, which keeps
            # a compiled decoding step to one graph (decoding/compiled.py).
            spare = 1 if self.window is None else 0
            slots = max(slots, self.capacity + spare, 2 * current)
        shape = (like.size(0), like.size(1), slots, like.size(3))
        k, v = like.new_empty(shape), like.new_empty(shape)
        if current:
            k[:, :, :current], v[:, :, :current] = self._k, self._v
        self._k, self._v = k, v

    def reorder(self, index: torch.Tensor) -> "KVCache":
        """Select batch rows (beam search keeps the surviving hypotheses); copies only the filled slots."""
        if self._k is None:
            return KVCache(None, None, self.length, self.capacity, self.window)
        filled = self._k.size(2) if self.window is not None else self.filled  # a ring's slots are all in use
        k = self._k.new_empty((index.numel(), *self._k.shape[1:]))
        v = self._v.new_empty((index.numel(), *self._v.shape[1:]))
        torch.index_select(self._k[:, :, :filled], 0, index, out=k[:, :, :filled])
        torch.index_select(self._v[:, :, :filled], 0, index, out=v[:, :, :filled])
        return KVCache(k, v, self.length, self.capacity, self.window)


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

    def cross_attention_weights(
        self, x: torch.Tensor, context: torch.Tensor | KVCache, mask: torch.Tensor | None = None
    ) -> torch.Tensor:
        """(B, H, T, S) weights of the queries ``x`` over the encoder output ``context`` (cross-attention only)."""
        if not self.cross:
            raise ValueError("cross_attention_weights needs a cross-attention module")
        kv = context if isinstance(context, KVCache) else self.project_context(context)
        return attention_weights(self._split_heads(self.q_proj(x)), kv.k, mask)

    def forward(
        self,
        x: torch.Tensor,
        context: torch.Tensor | KVCache | None = None,
        mask: torch.Tensor | None = None,
        is_causal: bool = False,
        cache: KVCache | None = None,
        position_offset: int = 0,
    ) -> tuple[torch.Tensor, KVCache | None]:
        """x: (B, T, D) queries. Returns (output (B, T, D), updated self-attention cache or None).

        Cross-attention: ``context`` is the encoder output (B, S, D) or its precomputed KVCache.
        Incremental self-attention: pass the previous ``cache`` (or an empty one) and the absolute position of
        x's first token as ``position_offset``; the returned cache holds all keys/values so far.
        """
        if self.cross:
            q = self._split_heads(self.q_proj(x))
            kv = context if isinstance(context, KVCache) else self.project_context(context)
            k, v, new_cache = kv.k, kv.v, None
        else:
            q, k, v = (self._split_heads(t) for t in self.qkv_proj(x).chunk(3, dim=-1))
            if self.rotary is not None:
                q = self.rotary(q, position_offset)
                k = self.rotary(k, position_offset)
            new_cache = None
            if cache is not None:
                # A causal sliding window never looks further back than `window` keys (itself included): the
                # cache keeps only those (see KVCache), which enforces the window and bounds decoding memory.
                cache.append(k, v)
                k, v, new_cache = cache.k, cache.v, cache
        attend = BACKENDS[self.backend]
        dropout_p = self.dropout if self.training else 0.0
        if self.window is not None and not self.cross and cache is None:
            out = windowed_attention(q, k, v, self.window, is_causal, key_padding=mask, attend=attend,
                                     dropout_p=dropout_p)
        else:
            out = attend(q, k, v, mask=mask, is_causal=is_causal, dropout_p=dropout_p)
        out = out.transpose(1, 2).flatten(-2)  # (B, T, D)
        return self.out_proj(out), new_cache
