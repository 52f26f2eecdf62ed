"""Token-budget batches of similar-length pairs, deterministic per (seed, epoch).

How an epoch's batches are made (``TokenBudgetSampler.batches(epoch)``):

1. shuffle all pair indices with a generator seeded by (seed, epoch);
2. cut the permutation into chunks of ``chunk_size`` pairs and sort each chunk by length, so a batch holds
   pairs of similar length (little padding) while the epoch stays random at the chunk scale;
3. fill batches greedily in that order: a batch takes pairs while ``n_pairs * longest <= max_tokens``, where a
   pair's size is its number of positions on its longer side (``max(n_src, n_tgt) + 1``, see preprocess.py);
4. shuffle the order of the batches, so lengths are mixed over training time.

The batches are the same on every rank: the trainer gives each rank its share of every update's group of
batches (``training/trainer.py``), and resumes mid-epoch by its position in this list.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np
import torch

from vaswani.errors import ConfigError

PAD_ID, BOS_ID, EOS_ID = 0, 1, 2


# ------------------------------------------------------------------------------------------------ Batch


@dataclass
class Batch:
    """A padded batch. Row b of ``tgt_in`` is ``<s> y1 … ym`` and of ``tgt_out`` is ``y1 … ym </s>``."""

    src: torch.Tensor  # (B, S) long: x1 … xn </s> <pad> …
    tgt_in: torch.Tensor  # (B, T) long: <s> y1 … ym <pad> …  (decoder input)
    tgt_out: torch.Tensor  # (B, T) long: y1 … ym </s> <pad> …  (what to predict; pad = ignore in the loss)
    n_src_tokens: int  # non-pad positions in src
    n_tgt_tokens: int  # non-pad positions in tgt_out: the number of predictions the loss averages over
    indices: torch.Tensor  # (B,) long: the dataset index of each row

    def __len__(self) -> int:
        return self.src.shape[0]

    def to(self, device: torch.device | str, non_blocking: bool = False) -> "Batch":
        move = lambda t: t.to(device, non_blocking=non_blocking)  # noqa: E731
        return Batch(move(self.src), move(self.tgt_in), move(self.tgt_out), self.n_src_tokens,
                     self.n_tgt_tokens, self.indices)


def pad_sources(
    sequences: Sequence[Sequence[int]], eos_id: int = EOS_ID, pad_id: int = PAD_ID
) -> torch.Tensor:
    """(B, S) long tensor of ``x1 … xn </s>`` rows padded with ``pad_id``: the encoder input convention (the
    source side of :func:`collate`)."""
    width = max(len(seq) for seq in sequences) + 1
    out = np.full((len(sequences), width), pad_id, dtype=np.int64)
    for row, seq in enumerate(sequences):
        out[row, : len(seq)] = seq
        out[row, len(seq)] = eos_id
    return torch.from_numpy(out)


def collate(
    items: Sequence[tuple[int, np.ndarray, np.ndarray]],
    pad_id: int = PAD_ID,
    bos_id: int = BOS_ID,
    eos_id: int = EOS_ID,
) -> Batch:
    """Build a Batch from ``(index, source ids, target ids)`` items (what ``EncodedCorpus[i]`` returns)."""
    indices = [item[0] for item in items]
    sources = [item[1] for item in items]
    targets = [item[2] for item in items]
    src = pad_sources(sources, eos_id, pad_id)
    width = max(len(t) for t in targets) + 1
    tgt_in = np.full((len(targets), width), pad_id, dtype=np.int64)
    tgt_out = np.full((len(targets), width), pad_id, dtype=np.int64)
    for row, seq in enumerate(targets):
        m = len(seq)
        tgt_in[row, 0] = bos_id
        tgt_in[row, 1 : m + 1] = seq
        tgt_out[row, :m] = seq
        tgt_out[row, m] = eos_id
    return Batch(
        src=src,
        tgt_in=torch.from_numpy(tgt_in),
        tgt_out=torch.from_numpy(tgt_out),
        n_src_tokens=int(sum(len(s) + 1 for s in sources)),
        n_tgt_tokens=int(sum(len(t) + 1 for t in targets)),
        indices=torch.tensor(indices, dtype=torch.long),
    )


# ---------------------------------------------------------------------------------------------- sampler


class EpochSampler:
    """Batches of dataset indices that depend only on (seed, epoch). The last epoch's are kept: the trainer asks for
    them often."""

    _cache: tuple[int, list[np.ndarray]] | None = None

    def batches(self, epoch: int) -> list[list[int]]:
        """The batches of ``epoch``, deterministic in (seed, epoch)."""
        return [batch.tolist() for batch in self.index_arrays(epoch)]

    def index_arrays(self, epoch: int) -> list[np.ndarray]:
        """The batches of ``epoch`` as arrays of indices: what training takes, with no Python object per pair (a
        corpus of millions of pairs would otherwise hold millions of ints)."""
        if self._cache is None or self._cache[0] != epoch:
            self._cache = (epoch, self._make(epoch))
        return list(self._cache[1])

    def _make(self, epoch: int) -> list[np.ndarray]:
        raise NotImplementedError


class TokenBudgetSampler(EpochSampler):
    """An epoch's batches as lists of dataset indices.

    ``src_lengths``/``tgt_lengths`` are BPE token counts without specials (``EncodedCorpus.src_lengths``);
    each side then occupies length + 1 positions.
    """

    def __init__(
        self,
        src_lengths: np.ndarray,
        tgt_lengths: np.ndarray,
        max_tokens: int,
        seed: int = 0,
        shuffle: bool = True,
        chunk_size: int = 8192,
        max_sentences: int | None = None,
    ) -> None:
        src_lengths = np.asarray(src_lengths, dtype=np.int64)
        tgt_lengths = np.asarray(tgt_lengths, dtype=np.int64)
        if src_lengths.shape != tgt_lengths.shape or src_lengths.ndim != 1:
            raise ConfigError("src_lengths and tgt_lengths must be 1-d arrays of the same length")
        self.sizes = np.maximum(src_lengths, tgt_lengths) + 1  # positions on the longer side
        if len(self.sizes) == 0:
            raise ConfigError("cannot batch an empty dataset")
        if max_tokens < int(self.sizes.max()):
            raise ConfigError(
                f"max_tokens={max_tokens} is smaller than the longest example ({int(self.sizes.max())} positions); "
                "raise max_tokens or prepare the data with a smaller max_len"
            )
        if max_sentences is not None and max_sentences < 1:
            raise ConfigError(f"max_sentences={max_sentences} must be at least 1")
        self.max_tokens = max_tokens
        self.max_sentences = max_sentences
        self.seed = seed
        self.shuffle = shuffle
        self.chunk_size = chunk_size

    def _make(self, epoch: int) -> list[np.ndarray]:
        rng = np.random.default_rng([self.seed, epoch])
        order = rng.permutation(len(self.sizes)) if self.shuffle else np.arange(len(self.sizes))
        batches: list[np.ndarray] = []
        for begin in range(0, len(order), self.chunk_size):
            chunk = order[begin : begin + self.chunk_size]
            chunk = chunk[np.argsort(self.sizes[chunk], kind="stable")]
            batches += pack(chunk, self.sizes[chunk], self.max_tokens, self.max_sentences)
        if self.shuffle:
            batches = [batches[i] for i in rng.permutation(len(batches))]
        return batches


class WeightedSampler(EpochSampler):
    """Token-budget batches of a corpus whose pairs are taken at different rates. Each epoch a pair of
    weight w appears floor(w) times, and once more with probability w - floor(w), drawn from (seed, epoch);
    the copies are then batched as :class:`TokenBudgetSampler` batches them. A weight of 3 upsamples a small
    corpus three times; 0.5 takes half of a large one, another half each epoch."""

    def __init__(self, src_lengths: np.ndarray, tgt_lengths: np.ndarray, weights: np.ndarray, max_tokens: int,
                 seed: int = 0) -> None:
        self.src_lengths = np.asarray(src_lengths, dtype=np.int64)
        self.tgt_lengths = np.asarray(tgt_lengths, dtype=np.int64)
        self.weights = np.asarray(weights, dtype=np.float64)
        if self.weights.shape != self.src_lengths.shape or not (self.weights > 0).all():
            raise ConfigError("a weighted sampler needs one positive weight per pair")
        TokenBudgetSampler(self.src_lengths, self.tgt_lengths, max_tokens)  # refuses a pair past the budget
        self.max_tokens, self.seed = max_tokens, seed

    def _make(self, epoch: int) -> list[np.ndarray]:
        rng = np.random.default_rng([self.seed, epoch, 1])  # another stream than the batches' shuffle
        whole = np.floor(self.weights)
        copies = whole.astype(np.int64) + (rng.random(len(self.weights)) < self.weights - whole)
        taken = np.repeat(np.arange(len(copies)), copies)
        if len(taken) == 0:  # every weight below 1 and none drawn: an epoch still trains on something
            taken = np.arange(1)
        batches = TokenBudgetSampler(self.src_lengths[taken], self.tgt_lengths[taken], self.max_tokens,
                                     seed=self.seed)
        return [taken[batch] for batch in batches.index_arrays(epoch)]


def pack(indices: np.ndarray, sizes: np.ndarray, max_tokens: int,
         max_sentences: int | None = None) -> list[np.ndarray]:
    """Greedy batches over ``indices`` sorted by ascending ``sizes``: each takes as many as fit the budget (and,
    if given, at most ``max_sentences``).

    With ascending sizes the padded cost of the first k pairs from position i is k * sizes[i + k - 1], which
    grows with k, so each batch's length is found by a binary search over k (on plain ints: a corpus of millions
    of pairs makes hundreds of thousands of batches).
    """
    batches = []
    lengths = sizes.tolist()
    i, n = 0, len(lengths)
    while i < n:
        most = min(max_tokens // lengths[i], n - i)  # no batch starting here can hold more pairs than this
        if max_sentences is not None:
            most = min(most, max_sentences)
        fitting, too_many = 1, most + 1  # k = fitting fits; k = too_many does not (or is past the window)
        if most * lengths[i + most - 1] <= max_tokens:
            fitting = most
        else:
            too_many = most
            while too_many - fitting > 1:
                middle = (fitting + too_many) // 2
                if middle * lengths[i + middle - 1] <= max_tokens:
                    fitting = middle
                else:
                    too_many = middle
        batches.append(indices[i : i + fitting])
        i += fitting
    return batches
