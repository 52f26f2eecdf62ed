"""What the trainer needs from the data pipeline: prepared splits, the epoch's batches, collated tensors.

Preparation (tokenizer training, encoding, caching) runs on rank 0 first; the other ranks then load the same
cache, so a distributed start never races on the files.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from vaswani.data.batching import Batch, TokenBudgetSampler, collate
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
    tokenizer_file: Path  # the run's copy, saved into every checkpoint
    train: EncodedCorpus
    valid: EncodedCorpus
    valid_corpus: ParallelCorpus
    sampler: TokenBudgetSampler  # over train, unsharded: the trainer assigns batches to ranks itself
    valid_sampler: TokenBudgetSampler

    @property
    def batches_per_epoch(self) -> int:
        return len(self.sampler.all_batches(0))

    def epoch_batches(self, epoch: int) -> list[list[int]]:
        """All batches of the epoch (every rank's), deterministic in (seed, epoch)."""
        return [batch.tolist() for batch in self.sampler.all_batches(epoch)]

    def valid_batches(self) -> list[list[int]]:
        return [batch.tolist() for batch in self.valid_sampler.all_batches(0)]

    def target_tokens(self, indices: list[int]) -> int:
        """Real target positions (y1 … yn </s>) of a batch: the loss's normaliser."""
        return int(self.train.tgt_lengths[indices].sum()) + len(indices)

    def flop_shape(self, indices: list[int]) -> tuple[int, int, int, int]:
        """(real source tokens, real target tokens, padded source length, padded target length)."""
        src, tgt = self.train.src_lengths[indices] + 1, self.train.tgt_lengths[indices] + 1
        return int(src.sum()), int(tgt.sum()), int(src.max()), int(tgt.max())

    def collate(self, indices: list[int], device: torch.device, split: str = "train") -> Batch:
        corpus = self.train if split == "train" else self.valid
        t = self.tokenizer
        batch = collate([corpus[i] for i in indices], t.pad_id, t.bos_id, t.eos_id)
        return batch.to(device, non_blocking=device.type == "cuda")

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
    tokenizer_file = run_dir / "tokenizer.json"
    if world.is_main:
        atomic_copy(prepared.tokenizer_path, tokenizer_file)
    train, valid = prepared.splits["train"], prepared.splits[dc.valid_split]
    sampler = TokenBudgetSampler(train.src_lengths, train.tgt_lengths, tc.max_tokens, seed=tc.seed, shuffle=True)
    valid_sampler = TokenBudgetSampler(valid.src_lengths, valid.tgt_lengths, tc.max_tokens, shuffle=False)
    return TrainingData(prepared.tokenizer, tokenizer_file, train, valid, prepared.corpora[dc.valid_split], sampler,
                        valid_sampler)


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
