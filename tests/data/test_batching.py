"""Batches: the decoder shift, padding that never counts, the token budget, determinism."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from vaswani.data.batching import BOS_ID, EOS_ID, PAD_ID, TokenBudgetSampler, collate, pad_sources
from vaswani.data.cache import EncodedCorpus
from vaswani.errors import ConfigError

VOCAB = 500


@pytest.fixture(scope="module")
def corpus() -> EncodedCorpus:
    """3,000 pairs with Multi30k-like lengths (1-40 tokens) and ids that are never special (>= 4)."""
    rng = np.random.default_rng(0)
    src_lens = np.clip(rng.normal(14, 6, 3000).astype(int), 1, 40)
    tgt_lens = np.clip(src_lens + rng.integers(-3, 4, 3000), 1, 40)
    make = lambda lens: [rng.integers(4, VOCAB, n).tolist() for n in lens]  # noqa: E731
    return EncodedCorpus.from_sequences(make(src_lens), make(tgt_lens), vocab_size=VOCAB)


def sampler_for(corpus, **kwargs) -> TokenBudgetSampler:
    kwargs.setdefault("max_tokens", 600)
    return TokenBudgetSampler(corpus.src_lengths, corpus.tgt_lengths, **kwargs)


def test_decoder_input_is_the_target_shifted_right(corpus):
    batch = collate([corpus[i] for i in range(32)])
    tgt_in, tgt_out = batch.tgt_in, batch.tgt_out
    assert (tgt_in[:, 0] == BOS_ID).all()
    # Same padding in both; every real input position t >= 1 holds the token to be predicted at t - 1,
    # so the token predicted at t is never part of the input up to t.
    assert torch.equal(tgt_in == PAD_ID, tgt_out == PAD_ID)
    real = tgt_in[:, 1:] != PAD_ID
    assert torch.equal(tgt_in[:, 1:][real], tgt_out[:, :-1][real])
    for row in range(32):
        target = corpus.target(row).tolist()
        m = len(target)
        assert tgt_out[row, : m + 1].tolist() == target + [EOS_ID]
        assert tgt_in[row, : m + 1].tolist() == [BOS_ID] + target
        assert batch.src[row, : len(corpus.source(row)) + 1].tolist() == corpus.source(row).tolist() + [EOS_ID]
        assert (batch.src[row, len(corpus.source(row)) + 1 :] == PAD_ID).all()
    assert BOS_ID not in tgt_out and EOS_ID not in tgt_in
    assert batch.n_tgt_tokens == int((tgt_out != PAD_ID).sum()) and batch.n_src_tokens == int((batch.src != 0).sum())
    assert batch.indices.tolist() == list(range(32)) and batch.src.dtype == torch.long


def test_padding_never_contributes_to_the_loss(corpus):
    batch = collate([corpus[i] for i in range(0, 600, 20)])
    logits = torch.randn(*batch.tgt_out.shape, VOCAB, dtype=torch.float64)

    def loss(lg):
        return F.cross_entropy(lg.reshape(-1, VOCAB), batch.tgt_out.reshape(-1), ignore_index=PAD_ID, reduction="sum")

    padded = batch.tgt_out == PAD_ID
    assert padded.any(), "the test needs a batch with padding"
    changed = logits.clone()
    changed[padded] = torch.randn(int(padded.sum()), VOCAB, dtype=torch.float64) * 100
    assert loss(changed).item() == pytest.approx(loss(logits).item(), rel=1e-12)
    # n_tgt_tokens is the number of terms in the sum: sum / n_tgt_tokens is the mean over real tokens.
    mean = F.cross_entropy(logits.reshape(-1, VOCAB), batch.tgt_out.reshape(-1), ignore_index=PAD_ID)
    assert (loss(logits) / batch.n_tgt_tokens).item() == pytest.approx(mean.item(), rel=1e-12)


def test_every_example_once_per_epoch_and_budget_respected(corpus):
    sampler = sampler_for(corpus, max_tokens=600)
    sizes = np.maximum(corpus.src_lengths, corpus.tgt_lengths) + 1
    for epoch in (0, 1):
        batches = sampler.batches(epoch)
        flat = np.concatenate(batches)
        assert len(flat) == len(corpus) and np.array_equal(np.sort(flat), np.arange(len(corpus)))
        real, padded = 0, 0
        for indices in batches:
            assert len(indices) * sizes[indices].max() <= 600
            real += sizes[indices].sum()
            padded += len(indices) * sizes[indices].max()
        # Length bucketing keeps padding small (batches of random pairs would waste ~45% here).
        assert real / padded > 0.9, f"only {real / padded:.1%} of padded positions are real"
    batch = collate([corpus[i] for i in batches[0]])
    assert batch.src.numel() <= 600 and batch.tgt_in.numel() <= 600


def test_same_seed_same_batches_other_epoch_other_order(corpus):
    a, b = sampler_for(corpus, seed=7), sampler_for(corpus, seed=7)
    assert a.batches(3) == b.batches(3)
    assert a.batches(3) != a.batches(4)
    assert a.batches(3) != sampler_for(corpus, seed=8).batches(3)
    unshuffled = sampler_for(corpus, shuffle=False)
    assert unshuffled.batches(0) == unshuffled.batches(5)


def test_a_caller_cannot_change_the_cached_epoch(corpus):
    sampler = sampler_for(corpus, seed=3)
    first = sampler.batches(5)
    first[0].append(-1)
    first.pop()
    assert sampler.batches(5) == sampler_for(corpus, seed=3).batches(5)


def test_bad_settings(corpus):
    with pytest.raises(ConfigError, match="smaller than the longest example"):
        sampler_for(corpus, max_tokens=20)
    with pytest.raises(ConfigError, match="max_sentences=0 must be at least 1"):
        sampler_for(corpus, max_sentences=0)


def test_pad_sources_matches_collate(corpus):
    items = [corpus[i] for i in range(5)]
    assert torch.equal(pad_sources([item[1] for item in items]), collate(items).src)
