"""Subword splitting (data/subwords.py) on a BPE trained on Multi30k: every split spells the same text in tokens of
the vocabulary, a pair's split depends on (seed, epoch, pair, side) alone, and the trainer's token counts follow it.
Exact comparisons are of integer ids (no floating point involved)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from vaswani.data.batching import TokenBudgetSampler
from vaswani.data.cache import EncodedCorpus
from vaswani.data.subwords import SubwordSplitter, merge_parts
from vaswani.errors import ConfigError
from vaswani.training.data import TrainingData
from vaswani.training.presets import apply_settings, load_preset


@pytest.fixture(scope="module")
def sentences(tokenizer, multi30k_train) -> list[np.ndarray]:
    return [np.asarray(tokenizer.encode(text), dtype=np.uint16) for text in multi30k_train.target[:300]]


def test_every_merged_token_is_spelled_by_its_two_parts(tokenizer) -> None:
    parts = merge_parts(tokenizer)
    merged = np.flatnonzero(parts[:, 0] >= 0)
    assert len(merged) == tokenizer.vocab_size - 260  # every token but the 256 bytes and 4 specials
    for token in merged[:: max(1, len(merged) // 500)]:
        left, right = parts[token]
        assert tokenizer.id_to_token(int(left)) + tokenizer.id_to_token(int(right)) == tokenizer.id_to_token(int(token))


def test_a_split_spells_the_same_text_in_more_tokens_and_more_with_a_higher_probability(tokenizer, sentences) -> None:
    parts = merge_parts(tokenizer)
    lengths = []
    for probability in (0.0, 0.1, 0.3, 0.6):
        splitter = SubwordSplitter(parts, probability, seed=0, max_tokens=1000)
        split = splitter.split(sentences, range(len(sentences)), epoch=0, side=1)
        for original, pieces in zip(sentences, split):
            assert pieces.dtype == original.dtype and len(pieces) >= len(original)
            assert tokenizer.decode(pieces.tolist()) == tokenizer.decode(original.tolist())
        lengths.append(sum(map(len, split)))
    assert lengths[0] == sum(map(len, sentences))  # probability 0: the tokenizer's segmentation
    assert lengths[0] < lengths[1] < lengths[2] < lengths[3]


def test_a_pairs_split_depends_on_seed_epoch_pair_and_side_alone(tokenizer, sentences) -> None:
    splitter = SubwordSplitter(merge_parts(tokenizer), 0.3, seed=0, max_tokens=1000)
    batch = splitter.split(sentences[:50], range(50), epoch=3, side=0)
    alone = splitter.split([sentences[7]], [7], epoch=3, side=0)[0]
    assert np.array_equal(batch[7], alone)  # whatever batch the pair is in
    assert all(np.array_equal(a, b) for a, b in zip(batch, splitter.split(sentences[:50], range(50), 3, 0)))
    for other in ({"epoch": 4, "side": 0}, {"epoch": 3, "side": 1}):
        changed = splitter.split(sentences[:50], range(50), **other)
        assert any(not np.array_equal(a, b) for a, b in zip(batch, changed)), other
    reseeded = SubwordSplitter(merge_parts(tokenizer), 0.3, seed=1, max_tokens=1000)
    assert any(not np.array_equal(a, b) for a, b in zip(batch, reseeded.split(sentences[:50], range(50), 3, 0)))


def test_a_sequence_that_would_outgrow_the_length_limit_keeps_the_tokenizers_segmentation(tokenizer,
                                                                                         sentences) -> None:
    longest = max(sentences, key=len)
    tight = SubwordSplitter(merge_parts(tokenizer), 0.9, seed=0, max_tokens=len(longest))
    assert np.array_equal(tight.split([longest], [0], epoch=0, side=0)[0], longest)


def test_training_batches_and_their_token_counts_follow_the_epochs_segmentation(tokenizer, sentences) -> None:
    corpus = EncodedCorpus.from_sequences(sentences[:120], sentences[120:240], vocab_size=tokenizer.vocab_size)
    sampler = TokenBudgetSampler(corpus.src_lengths, corpus.tgt_lengths, max_tokens=400, seed=0)
    splitter = SubwordSplitter.for_tokenizer(tokenizer, 0.3, seed=0, max_tokens=63)

    def data() -> TrainingData:
        return TrainingData(tokenizer, Path("unused"), Path("unused"), corpus, corpus, None, sampler, sampler,
                            splitter=splitter)

    first, later = data(), data()
    later.epoch_batches(0)
    batch = [int(i) for i in later.epoch_batches(2)[0]]
    first.epoch_batches(2)  # a resumed run asks for its epoch without the ones before it
    collated = first.collate(batch, torch.device("cpu"))
    assert first.target_tokens(batch) == later.target_tokens(batch) == collated.n_tgt_tokens
    assert collated.n_tgt_tokens > int(corpus.tgt_lengths[batch].sum()) + len(batch)  # split: more tokens
    assert first.flop_shape(batch)[1] == [len(t) + 1 for _, _, t in first.train_pairs(batch)]
    first.epoch_batches(3)
    assert first.collate(batch, torch.device("cpu")).tgt_out.tolist() != collated.tgt_out.tolist()  # a new split


def test_splitting_with_fixed_batch_shapes_is_refused_naming_the_setting() -> None:
    with pytest.raises(ConfigError, match="data.subword_split: not with train.length_buckets"):
        apply_settings(load_preset("smoke"), ["data.subword_split=0.1", "train.length_buckets=4"])
