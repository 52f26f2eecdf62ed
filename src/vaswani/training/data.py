"""What the trainer needs from the data pipeline: prepared splits, the epoch's batches, batches on the device.

Preparation (tokenizer training, encoding, caching) runs on rank 0 first; the other ranks then load the same
cache, so a distributed start never races on the files.

Batches are token-budget batches padded to their longest pair, or, with ``train.length_buckets``, batches of a few
fixed shapes (``vaswani.data.buckets``) for training and validation alike. :meth:`TrainingData.loader` hands them
to the device one ahead of use: while the device computes on one batch the next is collated, pinned and copied.
"""

from __future__ import annotations

import dataclasses
import sys
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Iterator, Sequence

import numpy as np
import torch

from vaswani.data.batching import Batch, TokenBudgetSampler, WeightedSampler, collate
from vaswani.data.buckets import BucketSampler, bucket_lengths, pad_to_shape
from vaswani.data.cache import EncodedCorpus
from vaswani.data.corpora import ParallelCorpus, load_corpus
from vaswani.data.files import TRAIN, VALID, FileSplit
from vaswani.data.fingerprints import SplitFingerprint
from vaswani.data.languages import CORPUS_RECORD
from vaswani.data.pipeline import PreparedData, default_out_dir, prepare_dataset
from vaswani.data.registry import LOCAL
from vaswani.data.subwords import SubwordSplitter
from vaswani.data.tokenizer import Tokenizer
from vaswani.errors import ConfigError, VaswaniError
from vaswani.io import atomic_copy, file_sha256
from vaswani.records import write_record
from vaswani.training.checkpoint import latest_checkpoint
from vaswani.training.config import RunConfig
from vaswani.training.corpus_record import CorpusRecord, check_files_unchanged, corpus_record, recorded_out_dir
from vaswani.training.distributed import World
from vaswani.training.parent import Parent, parent_of, run_tokenizer

# Batches whose re-segmented pairs are kept: an update's group is counted before its batches are collated.
SPLIT_BATCHES_KEPT = 64


@dataclass
class TrainingData:
    tokenizer: Tokenizer
    tokenizer_file: Path  # the run's copy (RUN/tokenizer.json, see record_run_files), saved into every checkpoint
    prepared_tokenizer_file: Path  # the prepared data's
    train: EncodedCorpus
    valid: EncodedCorpus
    valid_corpus: ParallelCorpus
    # over train: every rank's batches; the trainer gives each its share
    sampler: TokenBudgetSampler | BucketSampler | WeightedSampler
    valid_sampler: TokenBudgetSampler | BucketSampler
    corpus_record: CorpusRecord | None = None  # corpus.json of the run (on the main rank)
    parent: Parent | None = None  # a new fine-tuned run's parent: its tokenizer prepared this data
    # data.subword_split: the training pairs re-segmented each epoch (batches keep the sampler's pairs; their
    # token counts follow the segmentation)
    splitter: SubwordSplitter | None = None
    # data.train_tags: the tag id put in front of each training pair's source (0: none); None when no part has one
    source_tags: np.ndarray | None = None
    # whose segmentation the training pairs have: the epoch epoch_batches last handed out
    _epoch: int = field(default=0, init=False, repr=False)
    _split: OrderedDict[tuple[int, tuple[int, ...]], list[tuple[int, np.ndarray, np.ndarray]]] = field(
        default_factory=OrderedDict, init=False, repr=False)

    @property
    def batches_per_epoch(self) -> int:
        return len(self.sampler.index_arrays(0))

    def epoch_batches(self, epoch: int) -> list[np.ndarray]:
        """All batches of the epoch (every rank's) as arrays of pair indices, deterministic in (seed, epoch). The
        training pairs that :meth:`collate` and :meth:`target_tokens` give from here on are this epoch's."""
        self._epoch = epoch
        return self.sampler.index_arrays(epoch)

    def train_pairs(self, indices: Sequence[int]) -> list[tuple[int, np.ndarray, np.ndarray]]:
        """``(index, source ids, target ids)`` of these training pairs, in the current epoch's segmentation, each
        source behind its part's tag."""
        pairs = self._segmented(indices)
        if self.source_tags is None:
            return pairs
        tags = self.source_tags
        return [(i, np.concatenate(([tags[i]], source)).astype(source.dtype) if tags[i] else source, target)
                for i, source, target in pairs]

    def _segmented(self, indices: Sequence[int]) -> list[tuple[int, np.ndarray, np.ndarray]]:
        if self.splitter is None:
            return [self.train[i] for i in indices]
        key = (self._epoch, tuple(int(i) for i in indices))
        if key not in self._split:  # asked for twice per batch: its token count, then the batch itself
            items = [self.train[i] for i in indices]
            sources = self.splitter.split([item[1] for item in items], key[1], self._epoch, side=0)
            targets = self.splitter.split([item[2] for item in items], key[1], self._epoch, side=1)
            self._split[key] = list(zip(key[1], sources, targets))
            while len(self._split) > SPLIT_BATCHES_KEPT:
                self._split.popitem(last=False)
        return self._split[key]

    def valid_batches(self) -> list[np.ndarray]:
        return self.valid_sampler.index_arrays(0)

    def target_tokens(self, indices: list[int]) -> int:
        """Real target positions (y1 … yn </s>) of a batch: the loss's normaliser."""
        if self.splitter is not None:
            return sum(len(target) + 1 for _, _, target in self.train_pairs(indices))
        return int(self.train.tgt_lengths[indices].sum()) + len(indices)

    def flop_shape(self, indices: list[int]) -> tuple[list[int], list[int]]:
        """What ``flops.training_flops`` counts a batch by: each sentence's real source length (with ``</s>``) and
        target length (``<s>`` y1 … yn, or y1 … yn ``</s>``)."""
        if self.splitter is not None or self.source_tags is not None:
            pairs = self.train_pairs(indices)
            return [len(source) + 1 for _, source, _ in pairs], [len(target) + 1 for _, _, target in pairs]
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
        sampler = self.sampler if split == "train" else self.valid_sampler
        items = self.train_pairs(indices) if split == "train" else [self.valid[i] for i in indices]
        t = self.tokenizer
        batch = collate(items, t.pad_id, t.bos_id, t.eos_id)
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

    def record_run_files(self, run_dir: Path) -> None:
        """Write the run's copy of the prepared data's tokenizer and its corpus record (when the run starts: loading
        writes nothing)."""
        atomic_copy(self.prepared_tokenizer_file, self.tokenizer_file)
        if self.corpus_record is not None:
            write_record(run_dir / CORPUS_RECORD, self.corpus_record)

    def valid_text(self, n: int) -> tuple[list[str], list[str]]:
        """The first n raw validation sentence pairs (for a quick BLEU against untokenized references)."""
        return self.valid_corpus.source[:n], self.valid_corpus.target[:n]


def load(config: RunConfig, run_dir: Path, world: World, resuming: bool = False) -> TrainingData:
    """The run's data, prepared on rank 0 first (the other ranks then load the same cache). A run fine-tuned
    from a parent (``train.init_from``, training/parent.py) prepares it with the parent's tokenizer. The run
    directory records the corpus (``corpus.json``: each file's path, line count and sha256); a run that
    recorded another one is refused."""
    dc, training = config.data, config.train
    parent = parent_of(config, resuming)
    tokenizer_file = run_tokenizer(config, run_dir, parent)
    files = dc.files()
    valid_split = valid_split_name(config)

    def prepare(progress: bool) -> PreparedData:
        if files is not None:
            return prepare_dataset(files=files, out_dir=recorded_out_dir(run_dir), vocab_size=dc.vocab_size,
                                   max_len=dc.max_len, tokenizer_sample=dc.tokenizer_sample, seed=dc.seed,
                                   progress=progress, tokenizer_path=tokenizer_file, tags=dc.train_tags)
        return prepare_dataset(dc.dataset, splits=("train", dc.valid_split), data_dir=dc.data_dir,
                               out_dir=default_out_dir(dc.dataset, dc.direction, dc.vocab_size),
                               vocab_size=dc.vocab_size, max_len=dc.max_len, direction=dc.direction,
                               train_split=dc.train_split, tokenizer_sample=dc.tokenizer_sample, seed=dc.seed,
                               progress=progress, tokenizer_path=tokenizer_file)

    if world.is_main:
        if files is not None and (run_dir / CORPUS_RECORD).is_file():  # a run resumed: before anything is prepared
            check_files_unchanged(run_dir, files)
        prepared = prepare(training.progress)
    world.barrier()
    if not world.is_main:
        prepared = prepare(False)  # everything is cached now: this only loads
    if world.is_main:
        check_same_tokenizer(prepared.tokenizer_path, run_dir)
        corpus = corpus_record(run_dir, config, prepared)
        if prepared.held_out is not None:
            print(f"validation: {prepared.held_out.describe()} of {files.train.describe()}", file=sys.stderr)
    else:
        corpus = None
    train, valid = prepared.splits["train"], prepared.splits[valid_split]
    if training.length_buckets:
        longest_valid = int(np.maximum(valid.src_lengths, valid.tgt_lengths).max()) + 1
        lengths = bucket_lengths(np.maximum(train.src_lengths, train.tgt_lengths) + 1, training.length_buckets,
                                 longest=longest_valid)
        sampler: TokenBudgetSampler | BucketSampler = BucketSampler(
            train.src_lengths, train.tgt_lengths, training.max_tokens, lengths, seed=training.seed, shuffle=True)
        valid_sampler: TokenBudgetSampler | BucketSampler = BucketSampler(
            valid.src_lengths, valid.tgt_lengths, training.max_tokens, lengths, shuffle=False)
    elif dc.train_weights:
        weights = np.asarray(dc.train_weights, dtype=np.float64)[part_of_pair(files.train, prepared.files[TRAIN],
                                                                              train.line_index)]
        sampler = WeightedSampler(train.src_lengths, train.tgt_lengths, weights, training.max_tokens,
                                  seed=training.seed)
        valid_sampler = TokenBudgetSampler(valid.src_lengths, valid.tgt_lengths, training.max_tokens, shuffle=False)
    else:
        sampler = TokenBudgetSampler(train.src_lengths, train.tgt_lengths, training.max_tokens, seed=training.seed,
                                     shuffle=True)
        valid_sampler = TokenBudgetSampler(valid.src_lengths, valid.tgt_lengths, training.max_tokens, shuffle=False)
    splitter = (SubwordSplitter.for_tokenizer(prepared.tokenizer, dc.subword_split, training.seed, dc.max_len - 1)
                if dc.subword_split else None)
    source_tags = None
    if any(dc.train_tags):
        ids = [prepared.tokenizer.tag_id(tag) if tag else 0 for tag in dc.train_tags]
        source_tags = np.asarray(ids, dtype=np.int64)[part_of_pair(files.train, prepared.files[TRAIN],
                                                                   train.line_index)]
    return TrainingData(prepared.tokenizer, run_dir / "tokenizer.json", prepared.tokenizer_path, train, valid,
                        prepared.corpora[valid_split], sampler, valid_sampler, corpus, parent, splitter, source_tags)


def settle(config: RunConfig, run_dir: str | Path, world: World | None = None,
           resuming: bool = False) -> tuple[RunConfig, TrainingData]:
    """The run's data (:func:`load`), and ``config`` settled with it: the model's vocabulary (its size and padding
    id) is the tokenizer's the data was prepared with, and nothing changes the config from here on."""
    data = load(config, Path(run_dir), world or World(), resuming=resuming)
    model = dataclasses.replace(config.model, vocab_size=data.tokenizer.vocab_size, pad_id=data.tokenizer.pad_id)
    return dataclasses.replace(config, model=model).settled(), data


def check_vocabulary(config: RunConfig, data: TrainingData) -> None:
    """Refuse, in one line, a model whose vocabulary is not the one its data was prepared with."""
    model, tokenizer = config.model, data.tokenizer
    if (model.vocab_size, model.pad_id) != (tokenizer.vocab_size, tokenizer.pad_id):
        raise ConfigError(f"model.vocab_size={model.vocab_size}, model.pad_id={model.pad_id}: the run's data was "
                          f"prepared with a tokenizer of {tokenizer.vocab_size} tokens and padding id "
                          f"{tokenizer.pad_id} ({data.prepared_tokenizer_file}); settle the config with its data "
                          "(vaswani.training.data.settle)", field="model.vocab_size")


def part_of_pair(split: FileSplit, record: SplitFingerprint, line_index: np.ndarray) -> np.ndarray:
    """The part (of ``split``) each encoded training pair's line came from, as an index into its parts."""
    records, lines = iter(record.files), []
    for part in split.parts:
        lines.append(next(records).lines)
        if not part.is_tsv:
            next(records)  # the target file: as many lines
    return np.searchsorted(np.cumsum(lines), line_index, side="right")


def valid_split_name(config: RunConfig) -> str:
    """The name of the run's validation split: ``data.valid_split`` of a registered dataset; "valid" for files."""
    return VALID if config.data.dataset == LOCAL else config.data.valid_split


def split_texts(config: RunConfig, splits: Iterable[str], run_dir: Path | None = None) -> dict[str, ParallelCorpus]:
    """The raw text of these splits of the run's corpus (its validation split and test sets, for references): read
    from the dataset's files, or, for the user's own files, from the data the run prepared (which holds the held-out
    validation pairs; found through ``run_dir``'s corpus.json, wherever the command runs). Files whose content
    changed since the run recorded them are refused, naming the first."""
    dc = config.data
    files = dc.files()
    if files is None:
        return {split: load_corpus(dc.dataset, split, dc.direction, data_dir=dc.data_dir) for split in splits}
    if run_dir is not None and (run_dir / CORPUS_RECORD).is_file():  # the references are the files it trained on
        check_files_unchanged(run_dir, files)
    # a fine-tuned run's data was prepared with its parent's tokenizer, which the run keeps a copy of
    own_tokenizer = run_dir / "tokenizer.json" if run_dir and config.train.init_from else None
    prepared = prepare_dataset(files=files, out_dir=recorded_out_dir(run_dir) if run_dir else None,
                               vocab_size=dc.vocab_size, max_len=dc.max_len, tokenizer_sample=dc.tokenizer_sample,
                               seed=dc.seed, tokenizer_path=own_tokenizer, tags=dc.train_tags)
    return {split: prepared.corpora[split] for split in splits}


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


__all__ = ["TrainingData", "check_same_tokenizer", "check_vocabulary", "load", "settle",
           "split_texts", "valid_split_name"]
