"""Subword splitting: a training-time regularizer that shows the model other segmentations of the same text.

Every BPE token other than a byte was made by merging two tokens. With probability ``p`` each such token of a
training pair is split back into those two, and each part again with the same probability, so a word reaches the
model in a different, finer segmentation from epoch to epoch, and the model learns to read and write the pieces
that rarer words are made of. It is the idea of BPE-dropout (Provilkov et al. 2020), which skips merges while it
encodes; splitting only refines the segmentation the tokenizer gives (it never merges across that segmentation's
boundaries), and it needs no second pass over the text: it works on the cached ids, batch by batch.

The draws depend only on (seed, epoch, pair, side, position, depth), through a counter-based hash: a pair is split
the same way whatever batch it lands in, on every rank and after a resume, so a run stays bit-exact.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

import numpy as np

from vaswani.data.tokenizer import Tokenizer

# Odd 64-bit constants that spread each part of a draw's key over all bits before the splitmix64 finaliser.
_SEED, _EPOCH, _SIDE, _PAIR, _POSITION, _DEPTH = (
    0x9E3779B97F4A7C15, 0xC2B2AE3D27D4EB4F, 0x165667B19E3779F9, 0xD6E8FEB86659FD93, 0xFF51AFD7ED558CCD,
    0xC4CEB9FE1A85EC53)
_WORD = 2**64  # keys wrap around like uint64 arithmetic (numpy arrays wrap silently; Python ints are reduced here)


def merge_parts(tokenizer: Tokenizer) -> np.ndarray:
    """``(vocab_size, 2)`` ids: the two tokens each token was merged from, ``-1`` for a byte or special token."""
    model = json.loads(tokenizer.to_str())["model"]
    vocab: dict[str, int] = model["vocab"]
    parts = np.full((tokenizer.vocab_size, 2), -1, dtype=np.int64)
    for merge in model["merges"]:
        left, right = merge.split(" ", 1) if isinstance(merge, str) else merge  # both forms tokenizers writes
        merged = vocab.get(left + right)
        if merged is not None and parts[merged, 0] < 0:  # the first merge that made it: the one that ranks first
            parts[merged] = vocab[left], vocab[right]
    return parts


def uniform(keys: np.ndarray) -> np.ndarray:
    """One draw in [0, 1) per uint64 key (splitmix64's finaliser): equal keys, equal draws."""
    z = keys + np.uint64(_SEED)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    z = z ^ (z >> np.uint64(31))
    return (z >> np.uint64(11)).astype(np.float64) * 2.0**-53


class SubwordSplitter:
    """Splits the tokens of training pairs with probability ``probability``, recursively; a sequence that would
    grow past ``max_tokens`` is kept as the tokenizer made it (the model's positions and the length limit hold)."""

    def __init__(self, parts: np.ndarray, probability: float, seed: int, max_tokens: int):
        if not 0.0 <= probability < 1.0:
            raise ValueError(f"splitting probability {probability} is not in [0, 1)")
        self.parts, self.probability, self.seed, self.max_tokens = parts, probability, seed, max_tokens

    @classmethod
    def for_tokenizer(cls, tokenizer: Tokenizer, probability: float, seed: int, max_tokens: int) -> SubwordSplitter:
        return cls(merge_parts(tokenizer), probability, seed, max_tokens)

    def split(self, sequences: Sequence[np.ndarray], pairs: Sequence[int], epoch: int, side: int) -> list[np.ndarray]:
        """Each sequence split as pair ``pairs[i]``'s ``side`` (0 source, 1 target) is split in ``epoch``."""
        if not sequences:
            return []
        lengths = np.fromiter((len(s) for s in sequences), dtype=np.int64, count=len(sequences))
        ids = np.concatenate([np.asarray(s, dtype=np.int64) for s in sequences])
        owner = np.repeat(np.arange(len(sequences)), lengths)
        salt = np.uint64((self.seed * _SEED + epoch * _EPOCH + side * _SIDE) % _WORD)
        base = np.asarray(pairs, dtype=np.uint64) * np.uint64(_PAIR) + salt
        fresh = np.ones(len(ids), dtype=bool)  # a token draws once: when the tokenizer or a split made it
        depth = 0
        while fresh.any():
            left, right = self.parts[ids, 0], self.parts[ids, 1]
            starts = np.concatenate(([0], np.cumsum(np.bincount(owner, minlength=len(sequences)))[:-1]))
            positions = (np.arange(len(ids)) - starts[owner]).astype(np.uint64)
            keys = base[owner] + positions * np.uint64(_POSITION) + np.uint64(depth * _DEPTH % _WORD)
            split = fresh & (left >= 0) & (uniform(keys) < self.probability)
            if not split.any():
                break
            counts = 1 + split
            first = np.cumsum(counts) - counts
            ids, owner, fresh = np.repeat(ids, counts), np.repeat(owner, counts), np.repeat(split, counts)
            ids[first[split]], ids[first[split] + 1] = left[split], right[split]
            depth += 1
        ends = np.cumsum(np.bincount(owner, minlength=len(sequences)))
        pieces = np.split(ids, ends[:-1])
        return [piece.astype(np.asarray(original).dtype) if len(piece) <= self.max_tokens else np.asarray(original)
                for piece, original in zip(pieces, sequences)]


__all__ = ["SubwordSplitter", "merge_parts", "uniform"]
