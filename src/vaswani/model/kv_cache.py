"""The key/value cache of one attention module, for decoding one position at a time."""

from __future__ import annotations

import torch


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
