"""Self-attention through a sliding window of k keys in O(T·k) memory (the paper's §4 "restricted" self-attention).

The queries are cut into blocks and each block is given only the keys its window can reach, so no (T, T) mask or
score matrix exists. While decoding step by step the window is the key/value cache's (a ring of k slots,
``kv_cache.py``); this module serves full passes (training, scoring, the encoder).
"""

from __future__ import annotations

from typing import Callable

import torch
import torch.nn.functional as F

from vaswani.model.masks import sliding_window_mask


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
    *,
    attend: Callable[..., torch.Tensor],
    dropout_p: float = 0.0,
) -> torch.Tensor:
    """Self-attention through a sliding window of ``window`` keys, in O(T·k) memory; equal to ``attend`` (one of
    the backends of ``attention.py``) with the full ``sliding_window_mask`` on every query that has a key to attend
    to.

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
