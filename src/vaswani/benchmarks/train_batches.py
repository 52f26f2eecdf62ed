"""The batches `vaswani bench train` times, every model on the same ones:

- ``fixed``: 64 sentences × 16 source + 16 target random tokens, no padding: one shape, the same for every model
  and every run, so that figures from different machines compare;
- ``multi30k``: real token-budget batches of Multi30k from our data pipeline, padded per batch as training pads
  them;
- ``random``: random ids with Multi30k-like lengths, padded per batch (no data needed).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from vaswani.config import ModelConfig
from vaswani.data.batching import TokenBudgetSampler, collate
from vaswani.data.buckets import BucketSampler, bucket_lengths, pad_to_shape
from vaswani.data.pipeline import default_out_dir, prepare_dataset
from vaswani.errors import VaswaniError
from vaswani.training.flops import training_flops

PAD, BOS, EOS = 0, 1, 2
BATCH_KINDS = ("fixed", "multi30k", "random")


@dataclass
class TrainBatch:
    src: torch.Tensor  # (B, S)
    tgt_in: torch.Tensor  # (B, T)
    tgt_out: torch.Tensor  # (B, T), padding = PAD

    @property
    def tokens(self) -> int:
        return int((self.tgt_out != PAD).sum())

    def to(self, device: torch.device) -> "TrainBatch":
        return TrainBatch(self.src.to(device), self.tgt_in.to(device), self.tgt_out.to(device))

    def training_flops(self, config: ModelConfig) -> float:
        """Matmul FLOPs of a training step on this batch (forward + backward, as MFU counts them)."""
        return training_flops(config, (self.src != PAD).sum(1).tolist(), (self.tgt_out != PAD).sum(1).tolist())



def fixed_batches(vocab_size: int, n_batches: int, sentences: int = 64, length: int = 16,
                  seed: int = 0) -> list[TrainBatch]:
    """Unpadded batches of ``sentences`` × ``length`` random source and target tokens."""
    generator = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(n_batches):
        src = torch.randint(4, vocab_size, (sentences, length), generator=generator)
        tgt = torch.randint(4, vocab_size, (sentences, length + 1), generator=generator)
        tgt[:, 0] = BOS
        out.append(TrainBatch(src, tgt[:, :-1].clone(), tgt[:, 1:].clone()))
    return out


def sentence_lengths(n: int, seed: int = 0) -> list[tuple[int, int]]:
    """(source, target) token lengths with a Multi30k-like spread (8-27 source tokens, target ~0.9x)."""
    generator = torch.Generator().manual_seed(seed)
    src = torch.randint(8, 28, (n,), generator=generator)
    tgt = (src.float() * 0.9 + torch.randint(-3, 4, (n,), generator=generator)).long().clamp(min=4)
    return list(zip(src.tolist(), tgt.tolist()))


def make_batches(config: ModelConfig, max_tokens: int, n_batches: int, seed: int = 0) -> list[TrainBatch]:
    """Token-budget batches of random ids with realistic lengths, padded to the longest (as training does)."""
    generator = torch.Generator().manual_seed(seed)
    pairs = sentence_lengths(max(n_batches, n_batches * max_tokens // 10), seed)
    longest = max(max(pair) for pair in pairs)
    if max_tokens < longest:  # as the training sampler refuses it: no batch could hold the longest sentence
        raise VaswaniError(f"max_tokens={max_tokens} is smaller than the longest random sentence ({longest} tokens); "
                           f"raise --max-tokens")
    batches, start = [], 0
    while len(batches) < n_batches:
        chunk = []
        while start < len(pairs) and (len(chunk) + 1) * max(max(p) for p in chunk + [pairs[start]]) <= max_tokens:
            chunk.append(pairs[start])
            start += 1
        if start >= len(pairs):
            start = 0
        src_len = max(s for s, _ in chunk) + 1
        tgt_len = max(t for _, t in chunk) + 1
        src = torch.zeros(len(chunk), src_len, dtype=torch.long)
        tgt = torch.zeros(len(chunk), tgt_len + 1, dtype=torch.long)
        for row, (s, t) in enumerate(chunk):
            src[row, :s] = torch.randint(4, config.vocab_size, (s,), generator=generator)
            src[row, s] = EOS
            tgt[row, 0] = BOS
            tgt[row, 1 : t + 1] = torch.randint(4, config.vocab_size, (t,), generator=generator)
            tgt[row, t + 1] = EOS
        batches.append(TrainBatch(src, tgt[:, :-1].clone(), tgt[:, 1:].clone()))
    return batches


def multi30k_batches(vocab_size: int, max_tokens: int, n_batches: int, data_dir: str | None,
                     seed: int = 0, length_buckets: int | None = None) -> list[TrainBatch]:
    """The first ``n_batches`` of a shuffled Multi30k training epoch, through our tokenizer, sampler and collate
    (with ``length_buckets``, the fixed shapes of ``train.length_buckets``)."""
    prepared = prepare_dataset("multi30k", splits=("train",), data_dir=data_dir, vocab_size=vocab_size,
                               out_dir=default_out_dir("multi30k", "de-en", vocab_size))
    train, tokenizer = prepared.splits["train"], prepared.tokenizer
    if tokenizer.vocab_size > vocab_size:
        raise VaswaniError(f"the Multi30k tokenizer has {tokenizer.vocab_size} tokens, more than the model's "
                           f"vocab_size {vocab_size}")
    if length_buckets:
        lengths = bucket_lengths(np.maximum(train.src_lengths, train.tgt_lengths) + 1, length_buckets)
        sampler = BucketSampler(train.src_lengths, train.tgt_lengths, max_tokens, lengths, seed=seed)
    else:
        sampler = TokenBudgetSampler(train.src_lengths, train.tgt_lengths, max_tokens, seed=seed, shuffle=True)
    out = []
    for indices in sampler.batches(0)[:n_batches]:
        batch = collate([train[int(i)] for i in indices], tokenizer.pad_id, tokenizer.bos_id, tokenizer.eos_id)
        if length_buckets:
            batch = pad_to_shape(batch, *sampler.shape(indices), tokenizer.pad_id)
        out.append(TrainBatch(batch.src, batch.tgt_in, batch.tgt_out))
    return out


def benchmark_batches(kind: str, config: ModelConfig, max_tokens: int, n: int,
                      data_dir: str | None = None, length_buckets: int | None = None) -> list[TrainBatch]:
    """``n`` batches of one of :data:`BATCH_KINDS` for a model of ``config`` (``length_buckets``: multi30k batches
    of that many fixed shapes)."""
    if kind == "fixed":
        return fixed_batches(config.vocab_size, n)
    if kind == "multi30k":
        return multi30k_batches(config.vocab_size, max_tokens, n, data_dir, length_buckets=length_buckets)
    return make_batches(config, max_tokens, n)


__all__ = ["BATCH_KINDS", "TrainBatch", "benchmark_batches", "fixed_batches", "make_batches", "multi30k_batches",
           "sentence_lengths"]
