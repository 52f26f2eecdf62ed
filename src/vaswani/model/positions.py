"""Position information: sinusoidal (the paper), learned embeddings, and rotary (RoPE, applied inside attention)."""

from __future__ import annotations

import math

import torch
import torch.nn as nn


def sinusoidal_table(length: int, d_model: int) -> torch.Tensor:
    """(length, d_model) table with PE(pos, 2i) = sin(pos / 10000^(2i/d)), PE(pos, 2i+1) = cos(same).

    Wavelengths form a geometric progression from 2π to 10000·2π, so for every offset k, PE(pos + k) is a fixed
    rotation of PE(pos) in each (sin, cos) pair — the property that lets attention read relative positions.
    """
    position = torch.arange(length, dtype=torch.float64)[:, None]
    inv_freq = torch.exp(torch.arange(0, d_model, 2, dtype=torch.float64) * (-math.log(10_000.0) / d_model))
    table = torch.zeros(length, d_model, dtype=torch.float64)
    table[:, 0::2] = torch.sin(position * inv_freq)
    table[:, 1::2] = torch.cos(position * inv_freq[: d_model // 2])
    return table.float()


class SinusoidalPositions(nn.Module):
    """Adds the fixed sinusoidal table; computed for ``max_len`` but grown on demand for longer inputs."""

    def __init__(self, d_model: int, max_len: int):
        super().__init__()
        self.d_model = d_model
        self.register_buffer("table", sinusoidal_table(max_len, d_model), persistent=False)

    def forward(self, x: torch.Tensor, offset: int = 0) -> torch.Tensor:  # x: (B, T, D)
        end = offset + x.size(1)
        if end > self.table.size(0):  # length generalisation experiments feed longer inputs than training
            self.table = sinusoidal_table(max(end, 2 * self.table.size(0)), self.d_model).to(self.table.device)
        return x + self.table[offset:end].to(x.dtype)


class LearnedPositions(nn.Module):
    """A trainable embedding per absolute position; cannot represent positions beyond ``max_len``."""

    def __init__(self, d_model: int, max_len: int):
        super().__init__()
        self.embedding = nn.Embedding(max_len, d_model)
        nn.init.normal_(self.embedding.weight, std=0.02)

    def forward(self, x: torch.Tensor, offset: int = 0) -> torch.Tensor:
        end = offset + x.size(1)
        if end > self.embedding.num_embeddings:
            raise ValueError(
                f"learned positions cover {self.embedding.num_embeddings} positions, got a sequence reaching {end}; "
                "raise model.max_len or use sinusoidal/rope positions"
            )
        positions = torch.arange(offset, end, device=x.device)
        return x + self.embedding(positions).to(x.dtype)


class RotaryEmbedding(nn.Module):
    """RoPE (Su et al. 2021): rotate each (even, odd) pair of query/key features by an angle pos·θ_i.

    Because rotations compose, q_m · k_n depends on m - n only: relative positions without any added vector.
    Applied inside self-attention to queries and keys (never to values, never to cross-attention).
    """

    def __init__(self, head_dim: int, base: float = 10_000.0):
        super().__init__()
        inv_freq = 1.0 / (base ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim))
        self.register_buffer("inv_freq", inv_freq, persistent=False)
        self._cache: tuple[int, torch.device, torch.Tensor, torch.Tensor] | None = None

    def _cos_sin(self, end: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        if self._cache is None or self._cache[0] < end or self._cache[1] != device:
            length = max(end, 256)
            angles = torch.outer(torch.arange(length, device=device, dtype=torch.float32), self.inv_freq.to(device))
            self._cache = (length, device, angles.cos(), angles.sin())
        return self._cache[2], self._cache[3]

    def forward(self, x: torch.Tensor, offset: int = 0) -> torch.Tensor:
        """x: (B, H, T, head_dim) -> same shape, rotated by positions offset .. offset+T-1."""
        cos, sin = self._cos_sin(offset + x.size(-2), x.device)
        cos = cos[offset : offset + x.size(-2)].to(x.dtype)  # (T, head_dim/2)
        sin = sin[offset : offset + x.size(-2)].to(x.dtype)
        even, odd = x[..., 0::2], x[..., 1::2]
        rotated = torch.stack((even * cos - odd * sin, even * sin + odd * cos), dim=-1)
        return rotated.flatten(-2)
