"""Length buckets: one (rows, length) shape per bucket in an epoch, every pair exactly once, inert rows of padding
only, and bucket lengths that pad least. That padding and inert rows change neither the loss nor its gradients is
tests/training/test_loss.py's."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch

from vaswani.data.batching import PAD_ID, collate
from vaswani.data.buckets import BucketSampler, bucket_lengths, pad_to_shape
from vaswani.data.cache import EncodedCorpus
from vaswani.errors import ConfigError

VOCAB = 300


@pytest.fixture(scope="module")
def corpus() -> EncodedCorpus:
    """2,000 pairs of 1-40 tokens, most of them 8-20 long (a triangle around 14, as Multi30k's), and ids that are
    never special (>= 4)."""
    generator = torch.Generator().manual_seed(0)
    lengths = (torch.randint(1, 21, (2000, 2), generator=generator).sum(1) - 7).clamp(1, 40)
    sources = [torch.randint(4, VOCAB, (int(n),), generator=generator).tolist() for n in lengths]
    targets = [torch.randint(4, VOCAB, (max(1, int(n) - i % 3),), generator=generator).tolist()
               for i, n in enumerate(lengths)]
    return EncodedCorpus.from_sequences(sources, targets, vocab_size=VOCAB)


def sizes_of(corpus: EncodedCorpus) -> np.ndarray:
    return np.maximum(corpus.src_lengths, corpus.tgt_lengths) + 1


def padded_positions(sizes: np.ndarray, lengths: list[int]) -> int:
    return int(sum(min(length for length in lengths if length >= size) for size in sizes))


def test_bucket_lengths_pad_least_of_all_choices() -> None:
    rng = np.random.default_rng(1)
    sizes = rng.integers(3, 19, 300)
    distinct = sorted(set(sizes.tolist()))
    for count in (1, 2, 3, 4):
        lengths = bucket_lengths(sizes, count)
        assert len(lengths) == count and lengths[-1] == sizes.max() and lengths == sorted(lengths)
        # every choice of count lengths among the sizes that ends at the longest one
        best = min(padded_positions(sizes, [*choice, distinct[-1]])
                   for choice in itertools.combinations(distinct[:-1], count - 1))
        assert padded_positions(sizes, lengths) == best
    assert bucket_lengths(np.array([5, 5, 7]), 6) == [5, 7]  # no more buckets than sizes
    assert bucket_lengths(np.array([5, 5, 7]), 1, longest=9) == [9]  # another split's longer pairs fit


def test_an_epoch_has_one_shape_per_bucket_and_every_pair_once(corpus: EncodedCorpus) -> None:
    lengths = bucket_lengths(sizes_of(corpus), 4)
    sampler = BucketSampler(corpus.src_lengths, corpus.tgt_lengths, 900, lengths, seed=3)
    batches = sampler.batches(2)
    shapes = {}
    for indices in batches:
        batch = pad_to_shape(collate([corpus[i] for i in indices]), *sampler.shape(indices), PAD_ID)
        assert batch.src.shape == batch.tgt_in.shape == batch.tgt_out.shape
        shapes[tuple(batch.src.shape)] = shapes.get(tuple(batch.src.shape), 0) + 1
        # the loss's normaliser counts real target tokens only, never the padding or the inert rows
        assert batch.n_tgt_tokens == int((batch.tgt_out != PAD_ID).sum()) == sum(
            len(corpus.target(i)) + 1 for i in indices)
        inert = slice(len(indices), None)
        assert (batch.src[inert] == PAD_ID).all() and (batch.tgt_in[inert] == PAD_ID).all()
    # one shape per bucket: rows = budget // length
    assert set(shapes) == {(900 // length, length) for length in lengths} == set(sampler.shapes())
    seen = np.sort(np.concatenate(batches))
    assert np.array_equal(seen, np.arange(len(corpus)))  # every pair exactly once
    # only each bucket's last batch holds inert rows
    assert sum(len(indices) < sampler.shape(indices)[0] for indices in batches) <= len(lengths)


def test_batches_are_deterministic_per_epoch_and_validation_keeps_its_order(corpus: EncodedCorpus) -> None:
    lengths = bucket_lengths(sizes_of(corpus), 3)
    make = lambda **kwargs: BucketSampler(corpus.src_lengths, corpus.tgt_lengths, 900, lengths, **kwargs)  # noqa: E731
    assert make(seed=1).batches(4) == make(seed=1).batches(4)
    assert make(seed=1).batches(4) != make(seed=1).batches(5)
    unshuffled = make(shuffle=False)
    assert unshuffled.batches(0) == unshuffled.batches(7)
    assert all(indices == sorted(indices) for indices in unshuffled.batches(0))


def test_pairs_or_budgets_that_do_not_fit_are_named(corpus: EncodedCorpus) -> None:
    sizes = sizes_of(corpus)
    with pytest.raises(ConfigError, match=r"longer than the longest length bucket \(20\)"):
        BucketSampler(corpus.src_lengths, corpus.tgt_lengths, 900, [10, 20])
    with pytest.raises(ConfigError, match=r"max_tokens=30 is smaller than the longest length bucket"):
        BucketSampler(corpus.src_lengths, corpus.tgt_lengths, 30, [int(sizes.max())])
    with pytest.raises(ConfigError, match="at least one length bucket"):
        bucket_lengths(sizes, 0)
