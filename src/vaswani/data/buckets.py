"""Length buckets: every batch of an epoch has one of a few fixed shapes, so that a GPU reuses its kernels,
attention plans, compiled graphs and CUDA graphs from the first updates on instead of preparing new ones for
almost every batch.

How an epoch's batches are made (``BucketSampler.batches(epoch)``):

1. each pair goes to the shortest bucket that holds it; its size is its number of positions on its longer side
   (``max(n_src, n_tgt) + 1``, as the token-budget sampler counts it);
2. a bucket of length L makes batches of exactly ``max_tokens // L`` rows: its pairs, shuffled with a generator
   seeded by (seed, epoch), are cut into batches of that many; the bucket's last batch holds the rest, and
   :func:`pad_to_shape` fills it up with *inert rows* (padding only) when it is collated;
3. the order of all batches is shuffled with the same generator.

Both sides of a batch are padded to its bucket's length, so an epoch has exactly one (rows, length) shape per
bucket. An inert row changes nothing: its targets are padding, which the loss ignores, and attention cannot turn
it into NaN (a query with no real key attends to every key, ``masks.guard_fully_masked_rows``).

The bucket lengths (:func:`bucket_lengths`) are the ones that pad the training pairs least for the number of
buckets asked for.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import torch
import torch.nn.functional as F

from vaswani.data.batching import Batch, EpochSampler
from vaswani.errors import ConfigError


def bucket_lengths(sizes: np.ndarray, count: int, longest: int | None = None) -> list[int]:
    """The ``count`` bucket lengths, ascending, that minimise the padded positions of pairs of these ``sizes``
    (each padded to the shortest bucket that holds it); fewer when there are fewer distinct sizes. The last is
    the longest size, or ``longest`` when that is longer (so that another split's pairs fit too).

    Dynamic programming over the distinct sizes: the cheapest way to cover the j shortest sizes with b buckets
    ends with a bucket at the j-th size, which holds the sizes after the cheapest cover of some shorter prefix
    with b - 1 buckets.
    """
    if count < 1:
        raise ConfigError(f"a batch needs at least one length bucket, got {count}", field="train.length_buckets")
    values, counts = np.unique(np.asarray(sizes, dtype=np.int64), return_counts=True)
    if longest is not None and longest > values[-1]:
        values, counts = np.append(values, longest), np.append(counts, 0)
    n = len(values)
    prefix = np.concatenate([[0], np.cumsum(counts)])  # pairs among the i shortest sizes
    buckets = min(count, n)
    # cost[b][j]: fewest padded positions covering the j shortest sizes with b buckets; start[b][j]: where its
    # last bucket begins
    cost = np.full((buckets + 1, n + 1), np.inf)
    start = np.zeros((buckets + 1, n + 1), dtype=np.int64)
    cost[0][0] = 0.0
    for b in range(1, buckets + 1):
        for j in range(1, n + 1):
            # the last bucket holds sizes i..j-1 and has length values[j-1]
            options = cost[b - 1][:j] + (prefix[j] - prefix[:j]) * values[j - 1]
            start[b][j] = int(np.argmin(options))
            cost[b][j] = options[start[b][j]]
    lengths, j = [], n
    for b in range(buckets, 0, -1):
        lengths.append(int(values[j - 1]))
        j = int(start[b][j])
    return sorted(set(lengths))


class BucketSampler(EpochSampler):
    """An epoch's batches as lists of dataset indices, each batch inside one length bucket (see the module's
    docstring); deterministic in (seed, epoch).

    ``src_lengths``/``tgt_lengths`` are BPE token counts without specials (``EncodedCorpus.src_lengths``).
    """

    def __init__(self, src_lengths: np.ndarray, tgt_lengths: np.ndarray, max_tokens: int, lengths: Sequence[int],
                 seed: int = 0, shuffle: bool = True) -> None:
        self.sizes = np.maximum(np.asarray(src_lengths, dtype=np.int64), np.asarray(tgt_lengths, dtype=np.int64)) + 1
        if len(self.sizes) == 0:
            raise ConfigError("cannot batch an empty dataset")
        self.lengths = sorted(int(length) for length in lengths)
        if int(self.sizes.max()) > self.lengths[-1]:
            raise ConfigError(f"a pair of {int(self.sizes.max())} positions is longer than the longest length bucket "
                              f"({self.lengths[-1]})", field="train.length_buckets")
        if max_tokens < self.lengths[-1]:
            raise ConfigError(f"max_tokens={max_tokens} is smaller than the longest length bucket "
                              f"({self.lengths[-1]} positions); raise max_tokens or prepare the data with a smaller "
                              "max_len", field="train.max_tokens")
        self.max_tokens = max_tokens
        self.seed = seed
        self.shuffle = shuffle
        # the bucket of each pair: the shortest length that holds it
        self.bucket_of = np.searchsorted(np.asarray(self.lengths), self.sizes, side="left")

    def rows(self, length: int) -> int:
        """Rows of every batch of the bucket of this length."""
        return self.max_tokens // length

    def shape(self, indices: Sequence[int]) -> tuple[int, int]:
        """(rows, length) of the batch these pairs were given: their bucket's."""
        length = self.lengths[int(self.bucket_of[np.asarray(indices)].max())]
        return self.rows(length), length

    def shapes(self) -> list[tuple[int, int]]:
        """Every (rows, length) shape a batch can have, one per bucket."""
        return [(self.rows(length), length) for length in self.lengths]

    def _make(self, epoch: int) -> list[np.ndarray]:
        rng = np.random.default_rng([self.seed, epoch])
        batches: list[np.ndarray] = []
        for bucket, length in enumerate(self.lengths):
            members = np.flatnonzero(self.bucket_of == bucket)
            if self.shuffle:
                members = members[rng.permutation(len(members))]
            rows = self.rows(length)
            batches += [members[i : i + rows] for i in range(0, len(members), rows)]
        if self.shuffle:
            batches = [batches[i] for i in rng.permutation(len(batches))]
        return batches


def pad_to_shape(batch: Batch, rows: int, length: int, pad_id: int) -> Batch:
    """``batch`` padded to ``rows`` × ``length`` on both sides: longer rows of padding, then inert rows (padding
    only). The token counts and indices stay those of the real pairs."""
    if len(batch) > rows or max(batch.src.size(1), batch.tgt_in.size(1)) > length:
        raise ValueError(f"a batch of {len(batch)} rows × {max(batch.src.size(1), batch.tgt_in.size(1))} positions "
                         f"does not fit the shape {rows} × {length}")

    def pad(t: torch.Tensor) -> torch.Tensor:
        return F.pad(t, (0, length - t.size(1), 0, rows - t.size(0)), value=pad_id)

    return Batch(pad(batch.src), pad(batch.tgt_in), pad(batch.tgt_out), batch.n_src_tokens, batch.n_tgt_tokens,
                 batch.indices)
