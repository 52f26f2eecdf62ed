"""The one mask convention of the project.

A mask is a boolean tensor that broadcasts to the attention scores, shape (batch, heads, queries, keys),
and **True means "this query may attend to this key"**. Masks are combined with ``&``. Builders below return
the smallest broadcastable shape so that combining them costs almost nothing:

- ``padding_mask(ids)``      (B, 1, 1, K): keys that are real tokens;
- ``causal_mask(T)``         (1, 1, T, T): key position <= query position;
- ``sliding_window_mask(..)`` (1, 1, Q, K): keys within the window around (or before) the query.

``attended_keys`` counts, per query, the keys these masks allow, without building them (FLOP counts use it).

Boolean masks are independent of the compute dtype, which is why they stay correct under bf16/fp16 autocast:
the backends turn them into the most negative number *of the score dtype* only at the last moment.
"""

from __future__ import annotations

import torch


def padding_mask(ids: torch.Tensor, pad_id: int = 0) -> torch.Tensor:
    """(B, L) token ids -> (B, 1, 1, L) mask, True where the key is a real token."""
    return (ids != pad_id)[:, None, None, :]


def causal_mask(length: int, device: torch.device | str | None = None) -> torch.Tensor:
    """(1, 1, T, T) lower-triangular mask: query t sees keys 0..t."""
    return torch.ones(length, length, dtype=torch.bool, device=device).tril()[None, None]


def sliding_window_mask(
    n_queries: int,
    n_keys: int,
    window: int,
    causal: bool,
    query_offset: int = 0,
    device: torch.device | str | None = None,
) -> torch.Tensor:
    """(1, 1, Q, K) band mask of a sliding window of ``window`` keys.

    Causal (decoder): query i sees keys i-window+1 .. i, i.e. itself and the window-1 before it.
    Bidirectional (encoder): query i sees keys with |i - j| <= window // 2.
    ``query_offset`` is the absolute position of the first query (incremental decoding: one query at step t).
    """
    query_pos = torch.arange(n_queries, device=device)[:, None] + query_offset
    key_pos = torch.arange(n_keys, device=device)[None, :]
    offset = query_pos - key_pos  # > 0: key lies in the past
    if causal:
        band = (offset >= 0) & (offset < window)
    else:
        band = offset.abs() <= window // 2
    return band[None, None]


def attended_keys(length: int, causal: bool, window: int | None = None) -> torch.Tensor:
    """(T,) the number of keys each of ``length`` self-attention queries may attend to: the True entries of each
    row of ``causal_mask`` (when causal) and ``sliding_window_mask`` (with a window), counted in O(T)."""
    position = torch.arange(length)
    if causal:
        seen = position + 1  # keys 0..i
        return seen if window is None else seen.clamp(max=window)
    if window is None:
        return torch.full((length,), length)
    half = window // 2
    return (position + half).clamp(max=length - 1) - (position - half).clamp(min=0) + 1


def guard_fully_masked_rows(mask: torch.Tensor) -> torch.Tensor:
    """Let query rows that may attend to nothing attend to everything instead.

    A row with no allowed key would give softmax over all -inf, i.e. NaN, which then poisons gradients of the
    whole batch. Such rows only exist for query positions that are themselves padding (e.g. an empty source),
    whose outputs are never used, so any finite value is correct for them.
    """
    return mask | ~mask.any(dim=-1, keepdim=True)
