"""What the trainer needs from the data pipeline: prepared splits, the epoch's batches, batches on the device.

Preparation (tokenizer training, encoding, caching) runs on rank 0 first; the other ranks then load the same
cache, so a distributed start never races on the files.

Batches are token-budget batches padded to their longest pair, or, with ``train.length_buckets``, batches of a few
fixed shapes (``vaswani.data.buckets``) for training and validation alike. :meth:`TrainingData.loader` hands them
to the device one ahead of use: while the device computes on one batch the next is collated, pinned and copied.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Iterator

import numpy as np
import torch

from vaswani.data.batching import Batch, TokenBudgetSampler, collate
from vaswani.data.buckets import BucketSampler, bucket_lengths, pad_to_shape
from vaswani.data.corpora import ParallelCorpus
from vaswani.data.pipeline import default_out_dir, prepare_dataset
from vaswani.data.preprocess import EncodedCorpus
from vaswani.data.tokenizer import Tokenizer
from vaswani.errors import VaswaniError
from vaswani.io import atomic_copy, file_sha256
from vaswani.training.checkpoint import latest_checkpoint
from vaswani.training.config import RunConfig
from vaswani.training.distributed import World


@dataclass
class TrainingData:
    tokenizer: Tokenizer
    tokenizer_file: Path  # the run's copy (RUN/tokenizer.json, see copy_tokenizer), saved into every checkpoint
    prepared_tokenizer_file: Path  # the prepared data's
    train: EncodedCorpus
    valid: EncodedCorpus
    valid_corpus: ParallelCorpus
    sampler: TokenBudgetSampler | BucketSampler  # over train: every rank's batches; the trainer gives each its share
    valid_sampler: TokenBudgetSampler | BucketSampler

    @property
    def batches_per_epoch(self) -> int:
        return len(self.sampler.batches(0))

    def epoch_batches(self, epoch: int) -> list[list[int]]:
        """All batches of the epoch (every rank's), deterministic in (seed, epoch)."""
        return self.sampler.batches(epoch)

    def valid_batches(self) -> list[list[int]]:
        return self.valid_sampler.batches(0)

    def target_tokens(self, indices: list[int]) -> int:
        """Real target positions (y1 … yn </s>) of a batch: the loss's normaliser."""
        return int(self.train.tgt_lengths[indices].sum()) + len(indices)

    def flop_shape(self, indices: list[int]) -> tuple[list[int], list[int]]:
        """What ``flops.training_flops`` counts a batch by: each sentence's real source length (with ``</s>``) and
        target length (``<s>`` y1 … yn, or y1 … yn ``</s>``)."""
        return (self.train.src_lengths[indices] + 1).tolist(), (self.train.tgt_lengths[indices] + 1).tolist()

    def collate(self, indices: list[int], device: torch.device, split: str = "train") -> Batch:
        """The batch of these pairs on ``device``, in its bucket's shape when batches are bucketed."""
        return self._to_device(self._collate(indices, split), device)

    def loader(self, batches: Iterable[list[int]], device: torch.device) -> Iterator[Batch]:
        """The training batches of these index lists on ``device``, in order, each one collated and on its way to
        the device before the one ahead of it is handed out: the device never waits for the host to prepare its
        next batch."""
        upcoming = None
        for indices in batches:
            ready, upcoming = upcoming, self._to_device(self._collate(indices, "train"), device)
            if ready is not None:
                yield ready
        if upcoming is not None:
            yield upcoming

    def _collate(self, indices: list[int], split: str) -> Batch:
        corpus, sampler = (self.train, self.sampler) if split == "train" else (self.valid, self.valid_sampler)
        t = self.tokenizer
        batch = collate([corpus[i] for i in indices], t.pad_id, t.bos_id, t.eos_id)
        if isinstance(sampler, BucketSampler):
            batch = pad_to_shape(batch, *sampler.shape(indices), t.pad_id)
        return batch

    @staticmethod
    def _to_device(batch: Batch, device: torch.device) -> Batch:
        if device.type != "cuda":
            return batch.to(device)
        # From page-locked memory the copy is asynchronous: the host queues it and goes on (from ordinary memory
        # CUDA first waits for the device to finish its queued work).
        pinned = Batch(batch.src.pin_memory(), batch.tgt_in.pin_memory(), batch.tgt_out.pin_memory(),
                       batch.n_src_tokens, batch.n_tgt_tokens, batch.indices)
        return pinned.to(device, non_blocking=True)

    def copy_tokenizer(self) -> None:
        """Write the run's copy of the prepared data's tokenizer (when the run starts: loading writes nothing)."""
        atomic_copy(self.prepared_tokenizer_file, self.tokenizer_file)

    def valid_text(self, n: int) -> tuple[list[str], list[str]]:
        """The first n raw validation sentence pairs (for a quick BLEU against untokenized references)."""
        return self.valid_corpus.source[:n], self.valid_corpus.target[:n]


def load(config: RunConfig, run_dir: Path, world: World) -> TrainingData:
    dc, tc = config.data, config.train
    out_dir = default_out_dir(dc.dataset, dc.direction, dc.vocab_size)

    def prepare():
        return prepare_dataset(dc.dataset, splits=("train", dc.valid_split), data_dir=dc.data_dir, out_dir=out_dir,
                               vocab_size=dc.vocab_size, max_len=dc.max_len, direction=dc.direction,
                               train_split=dc.train_split)

    if world.is_main:
        prepared = prepare()
    world.barrier()
    if not world.is_main:
        prepared = prepare()  # everything is cached now: this only loads
    if world.is_main:
        check_same_tokenizer(prepared.tokenizer_path, run_dir)
    train, valid = prepared.splits["train"], prepared.splits[dc.valid_split]
    if tc.length_buckets:
        longest_valid = int(np.maximum(valid.src_lengths, valid.tgt_lengths).max()) + 1
        lengths = bucket_lengths(np.maximum(train.src_lengths, train.tgt_lengths) + 1, tc.length_buckets,
                                 longest=longest_valid)
        sampler: TokenBudgetSampler | BucketSampler = BucketSampler(
            train.src_lengths, train.tgt_lengths, tc.max_tokens, lengths, seed=tc.seed, shuffle=True)
        valid_sampler: TokenBudgetSampler | BucketSampler = BucketSampler(
            valid.src_lengths, valid.tgt_lengths, tc.max_tokens, lengths, shuffle=False)
    else:
        sampler = TokenBudgetSampler(train.src_lengths, train.tgt_lengths, tc.max_tokens, seed=tc.seed, shuffle=True)
        valid_sampler = TokenBudgetSampler(valid.src_lengths, valid.tgt_lengths, tc.max_tokens, shuffle=False)
    return TrainingData(prepared.tokenizer, run_dir / "tokenizer.json", prepared.tokenizer_path, train, valid,
                        prepared.corpora[dc.valid_split], sampler, valid_sampler)


def check_same_tokenizer(tokenizer_path: Path, run_dir: Path) -> None:
    """Refuse to continue a run whose weights were trained with another tokenizer than the prepared data's (the
    data directory was prepared again since): its token ids would mean other words. Names both files."""
    latest = latest_checkpoint(run_dir / "checkpoints")
    trained_with = latest / "tokenizer.json" if latest is not None else None
    if trained_with is not None and trained_with.is_file() and \
            file_sha256(trained_with) != file_sha256(tokenizer_path):
        raise VaswaniError(f"{tokenizer_path} differs from {trained_with}, the tokenizer this run's weights were "
                           f"trained with; copy that one back to {tokenizer_path} (its cache is then rebuilt) or start "
                           "a new run")


__all__ = ["TrainingData", "check_same_tokenizer", "load"]
