"""Run configuration: model + data + training settings, named YAML presets, and ``--set section.key=value``.

A preset file (``src/vaswani/configs/NAME.yaml``) has three sections; ``model.preset`` picks a ModelConfig
preset that the other ``model`` keys then override::

    model: {preset: small, positions: sinusoidal}
    data:  {dataset: multi30k, vocab_size: 8000}
    train: {max_tokens: 4096, max_epochs: 20}
"""

from __future__ import annotations

import copy
import dataclasses
import re
from dataclasses import dataclass, field
from typing import Any, Literal

import yaml

from vaswani.config import ModelConfig
from vaswani.data.files import TRAIN, VALID, FileCorpus, FileSplit, file_part
from vaswani.data.languages import pair_from_files
from vaswani.data.languages import parse_direction as parse_pair
from vaswani.data.registry import DATASETS, DIRECTIONS, LOCAL, get_dataset
from vaswani.data.tokenizer import MAX_VOCAB_SIZE, MIN_VOCAB_SIZE, check_tag
from vaswani.errors import ConfigError, DataError
from vaswani.io import JsonObject
from vaswani.settings import (
    MAX_LENGTH,
    Limit,
    Precision,
    Settles,
    parse_settings,
    settle,
    validate_settings,
)
from vaswani.training.file_settings import file_parts, named_parts, one_part


@dataclass
class DataConfig(Settles):
    SECTION = "data"
    dataset: str = "multi30k"  # a registered dataset, or "local": the user's files below
    direction: str = "de-en"  # SOURCE-TARGET language codes (fr-en); a registered dataset offers de-en and en-de
    train_split: str = "train"
    valid_split: str = "val"
    test_split: str = "test2016"
    vocab_size: int = 8000  # BPE merges target; the model's vocab_size follows the trained tokenizer
    max_len: int = 64  # pairs with a longer side (in tokens incl. <s>/</s>) are dropped, as in the reference setups
    data_dir: str | None = None  # default: $VASWANI_DATA, then the download cache
    # dataset=local: the training split's parts, each [source, target] (aligned, plain or gzip) or [pairs.tsv]
    train_files: tuple[tuple[str, ...], ...] = ()
    # dataset=local: each part's pairs taken this often per epoch (data/batching.py WeightedSampler)
    train_weights: tuple[float, ...] = ()
    # dataset=local: a token put in front of each part's source sentences ("" for none), such as <BT> for
    # back-translated pairs (Caswell et al. 2019); a special token of the tokenizer
    train_tags: tuple[str, ...] = ()
    # dataset=local: [source, target] or [pairs.tsv]; none: valid_holdout pairs are held out of the training files
    valid_files: tuple[str, ...] = ()
    valid_holdout: int = 1000  # at most a tenth of the training pairs
    test_files: dict[str, tuple[str, ...]] = field(default_factory=dict)  # dataset=local: name -> [source, target]
    tokenizer_sample: int | None = 500_000  # training pairs the tokenizer learns from (None: all)
    seed: int = 0  # draws the tokenizer's sample and the held-out validation pairs
    # each BPE token of a training pair split into the two it was merged from with this probability, recursively,
    # anew every epoch (data/subwords.py); 0: the tokenizer's segmentation only
    subword_split: float = 0.0

    # max_len counts <s> or </s>: 2 is the shortest sequence that still holds a token
    LIMITS = {"vocab_size": Limit(ge=MIN_VOCAB_SIZE, le=MAX_VOCAB_SIZE), "max_len": Limit(ge=2, le=MAX_LENGTH),
              "valid_holdout": Limit(ge=1), "tokenizer_sample": Limit(ge=1), "seed": Limit(ge=0),
              "train_weights": Limit(gt=0, le=1000), "subword_split": Limit(ge=0, lt=1)}

    def __post_init__(self) -> None:
        self.train_files = file_parts(self.train_files, "data.train_files")
        self.valid_files = one_part(self.valid_files, "data.valid_files")
        self.test_files = named_parts(self.test_files, "data.test_files")
        validate_settings(self)
        # Only a registered name or local: the name becomes part of folder names (runs/data/NAME-..., cache
        # entries), so anything else, a path above all, is refused here rather than when the data is prepared.
        if self.dataset != LOCAL and self.dataset not in DATASETS:
            raise ConfigError(f"data.dataset={self.dataset!r} is not a dataset: one of {', '.join(DATASETS)}, or "
                              f"{LOCAL} for your own files (--src/--tgt or --tsv)", field="data.dataset")
        pair = parse_pair(self.direction)
        if len(self.train_weights) not in (0, len(self.train_files)):
            counts = f"{len(self.train_weights)} weight(s) for {len(self.train_files)} part(s)"
            raise ConfigError(f"data.train_weights: {counts} of data.train_files", field="data.train_weights")
        if len(self.train_tags) not in (0, len(self.train_files)):
            counts = f"{len(self.train_tags)} tag(s) for {len(self.train_files)} part(s)"
            raise ConfigError(f"data.train_tags: {counts} of data.train_files (\"\" for a part without one)",
                              field="data.train_tags")
        for tag in filter(None, self.train_tags):
            check_tag(tag)
        if self.dataset == LOCAL:
            if not self.train_files:
                raise ConfigError("data.dataset=local needs data.train_files (or --src/--tgt or --tsv)",
                                  field="data.train_files")
            two_files = next((part for part in self.train_files if len(part) == 2), None)
            named = pair_from_files(*two_files) if two_files else None
            if named is not None and named != pair:
                raise ConfigError(f"data.direction={self.direction} but the files {two_files[0]} and {two_files[1]} "
                                  f"are named {named.direction}; set data.direction={named.direction} (or "
                                  "--src-lang/--tgt-lang) or swap the files", field="data.direction")
            self.files()  # the test sets' names
        else:
            local = [name for name in ("train_files", "valid_files", "test_files") if getattr(self, name)]
            if local:
                raise ConfigError(f"data.{local[0]} names local files, which data.dataset=local reads; set "
                                  f"data.dataset=local, or leave out the files to train on {self.dataset}",
                                  field=f"data.{local[0]}")
            if self.direction not in DIRECTIONS:
                raise ConfigError(f"data.direction={self.direction} is not a direction of the registered datasets "
                                  f"({', '.join(DIRECTIONS)}); another language pair trains on your own files "
                                  "(data.dataset=local)", field="data.direction")

    def files(self) -> FileCorpus | None:
        """The user's corpus as files (dataset=local), or None for a registered dataset."""
        if self.dataset != LOCAL:
            return None
        return FileCorpus(
            parse_pair(self.direction),
            FileSplit(TRAIN, tuple(file_part(part, "data.train_files") for part in self.train_files)),
            FileSplit(VALID, (file_part(self.valid_files, "data.valid_files"),)) if self.valid_files else None,
            tuple(FileSplit(name, (file_part(paths, f"data.test_files.{name}"),))
                  for name, paths in self.test_files.items()),
            self.valid_holdout,
        )


@dataclass
class TrainConfig(Settles):
    SECTION = "train"
    seed: int = 0
    # batches
    max_tokens: int = 4096  # token budget per batch (padded size of the bigger side)
    # batches of this many fixed shapes (data/buckets.py): every pair padded to one of this many lengths, a fixed
    # number of rows per length; None: each batch padded to its longest pair
    length_buckets: int | None = None
    grad_accum: int = 1
    # length of training
    max_epochs: int | None = 20
    max_steps: int | None = None
    max_minutes: float | None = None  # wall-clock budget; the run evaluates and checkpoints when it runs out
    # objective and optimiser: the paper's values (label smoothing 0.1, β2 0.98, ε 1e-9)
    label_smoothing: float = 0.1
    optimizer: Literal["adamw", "adam-l2"] = "adamw"
    betas: tuple[float, float] = (0.9, 0.98)
    eps: float = 1e-9
    weight_decay: float = 0.01
    # learning rate schedule
    schedule: Literal["noam", "linear", "cosine", "constant"] = "noam"
    lr_factor: float = 1.0  # noam: lr = factor · d_model^-0.5 · min(step^-0.5, step · warmup^-1.5)
    lr: float = 5e-4  # peak lr of the linear/cosine/constant schedules
    warmup_steps: int = 4000
    warmup_ramp: bool = True  # False: start at the peak rate (same peak and decay): the "no warmup" ablation
    min_lr_ratio: float = 0.0  # linear/cosine decay to lr · min_lr_ratio at the last step
    # linear/cosine: the decay also follows the clock, so that it ends when train.max_minutes does if that comes
    # before the last planned step (on a slower machine); its progress is the larger of the steps' and the clock's
    decay_on_clock: bool = False
    # a larger model where the machine is fast enough (training/budget.py): entries of space-separated
    # section.key=value items, smallest first; a new run measures the preset's model and then each entry for
    # scale_up_probe_seconds, and trains the largest that completes train.scale_up_min_epochs within
    # train.max_minutes (a run without both limits has no budget to fit: it trains the preset's model)
    scale_up_models: tuple[str, ...] = ()
    scale_up_probe_seconds: float = 15.0
    # the epochs a larger model must complete in the budget to be chosen (null, or more than train.max_epochs:
    # train.max_epochs); with train.decay_on_clock its cosine then ends on the clock, after fewer epochs than planned
    scale_up_min_epochs: int | None = None
    clip_grad_norm: float | None = 1.0
    # precision and speed
    precision: Precision = "auto"  # auto: bf16 where supported, else fp16/fp32
    compile: bool = False  # torch.compile the model and its loss; once per batch shape with train.length_buckets
    # record each batch shape's forward and backward as CUDA graphs and replay them (CUDA only, needs
    # train.length_buckets); with train.compile, of the compiled kernels
    cuda_graphs: bool = False
    # when the host reads an update's loss, gradient norm and finiteness: every-update (and a non-finite update
    # is skipped at once), or log-steps (they stay on the device until a log step, an evaluation, a checkpoint or
    # the end, and a non-finite update is skipped by the device); auto: log-steps on CUDA, every-update elsewhere
    host_sync: Literal["auto", "every-update", "log-steps"] = "auto"
    device: str = "auto"
    num_threads: int | None = None  # CPU threads for intra-op parallelism (None: PyTorch's default, one per core)
    # CPU: keep freed memory for reuse instead of unmapping it (devices.reuse_freed_memory): the logits of every
    # update otherwise come back as fresh pages to fault in; the process keeps its peak memory until it exits
    reuse_freed_memory: bool = True
    # evaluation, early stopping, checkpoints
    eval_every_steps: int | None = None  # None: at the end of each epoch
    bleu_subset: int = 200  # validation sentences greedily decoded for the quick BLEU (0 = off)
    early_stopping_metric: Literal["val_loss", "val_bleu"] = "val_loss"
    patience: int | None = 5  # evaluations without improvement before stopping (None = never)
    save_every_steps: int | None = None  # extra checkpoints between evaluations (exact resume, averaging)
    keep_checkpoints: int = 5  # step_* directories kept besides best and last
    log_every_steps: int = 50
    max_consecutive_nonfinite: int = 5
    deterministic: bool = False
    progress: bool = True
    # the final model (training/finalize.py): after the last update, choose the weights (best, last, or the
    # average of the last 2..average_last step checkpoints) and the search (greedy, or beam final_beam with each
    # length penalty in final_alphas) by BLEU on the whole validation split, then score final_test_splits
    final_model: bool = False
    average_last: int = 0
    # ensembles of the last k step checkpoints, one candidate per k (e.g. [2, 4]), searched as one model by the
    # torch engine: chosen, the final model holds its members (decoding/stored_ensemble.py)
    final_ensembles: tuple[int, ...] = ()
    final_beam: int = 5
    final_alphas: tuple[float, ...] = (0.6, 1.0, 1.5)
    final_test_splits: tuple[str, ...] = ()
    final_valid_sentences: int | None = None  # None: the whole validation split (fewer: cheaper, noisier choice)
    # the most minutes choosing the final model may take: when they are spent, the candidates and searches not yet
    # scored are left out (the best so far is chosen); the test splits are scored either way
    final_max_minutes: float | None = None
    # fine-tuning (training/parent.py): the checkpoint a new run starts from, and the part left as it was
    init_from: str | None = None
    freeze: Literal["none", "embeddings", "encoder"] = "none"

    LIMITS = {
        "seed": Limit(ge=0), "max_tokens": Limit(ge=1), "grad_accum": Limit(ge=1),
        "length_buckets": Limit(ge=1),
        "max_epochs": Limit(ge=1), "max_steps": Limit(ge=1), "max_minutes": Limit(gt=0),
        "label_smoothing": Limit(ge=0, lt=1), "betas": Limit(ge=0, lt=1), "eps": Limit(gt=0),
        "weight_decay": Limit(ge=0), "lr_factor": Limit(gt=0), "lr": Limit(gt=0), "warmup_steps": Limit(ge=0),
        "min_lr_ratio": Limit(ge=0, le=1), "clip_grad_norm": Limit(ge=0), "num_threads": Limit(ge=1),
        "eval_every_steps": Limit(ge=1), "bleu_subset": Limit(ge=0), "patience": Limit(ge=1),
        "save_every_steps": Limit(ge=1), "keep_checkpoints": Limit(ge=0), "log_every_steps": Limit(ge=1),
        "max_consecutive_nonfinite": Limit(ge=1), "scale_up_probe_seconds": Limit(gt=0, le=600),
        "scale_up_min_epochs": Limit(ge=1),
        "average_last": Limit(ge=0), "final_ensembles": Limit(ge=2, le=64), "final_beam": Limit(ge=1),
        "final_alphas": Limit(ge=0), "final_valid_sentences": Limit(ge=1), "final_max_minutes": Limit(gt=0),
    }

    def __post_init__(self) -> None:
        validate_settings(self)
        if self.max_epochs is None and self.max_steps is None:
            raise ConfigError("train.max_epochs and train.max_steps are both unset: the run would never end",
                              field="train.max_steps")
        if not re.fullmatch(r"auto|cpu|cuda(:\d+)?|mps", self.device):
            raise ConfigError(f"train.device={self.device!r} is not one of auto, cpu, cuda, cuda:N, mps",
                              field="train.device")
        if self.decay_on_clock and (self.schedule not in ("linear", "cosine") or self.max_minutes is None):
            raise ConfigError("train.decay_on_clock needs a decaying schedule (train.schedule=linear or cosine) and "
                              "a clock to follow (train.max_minutes)", field="train.decay_on_clock")
        if self.scale_up_models:
            self._check_scale_up_models()
        if self.schedule == "noam" and self.warmup_steps < 1:
            raise ConfigError("train.schedule=noam needs train.warmup_steps >= 1 (its peak is at the warmup's end)",
                              field="train.warmup_steps")
        if self.cuda_graphs and not self.length_buckets:
            raise ConfigError("train.cuda_graphs needs train.length_buckets: a CUDA graph replays one batch shape, and "
                              "without buckets almost every batch has a shape of its own", field="train.cuda_graphs")
        if self.cuda_graphs and self.grad_accum > 1:
            raise ConfigError("train.cuda_graphs needs train.grad_accum=1: a replay overwrites the gradients of the "
                              "micro-batch before it", field="train.cuda_graphs")

    def _check_scale_up_models(self) -> None:
        for entry in self.scale_up_models:
            try:
                parse_settings(settings_of(entry), ("model", "train"))
            except ConfigError as error:
                raise ConfigError(f"train.scale_up_models entry {entry!r}: expected model.KEY=VALUE or "
                                  "train.KEY=VALUE items separated by spaces, e.g. 'model.d_model=256 "
                                  f"model.d_ff=1024' ({error})", field="train.scale_up_models") from None


@dataclass
class RunConfig(Settles):
    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    train: TrainConfig = field(default_factory=TrainConfig)

    def __post_init__(self) -> None:
        # A learned position table has no row past model.max_len: the data's longest sequence must fit in it.
        if self.model.positions == "learned" and self.data.max_len > self.model.max_len:
            raise ConfigError(f"model.positions=learned has model.max_len={self.model.max_len} positions, fewer than "
                              f"the data.max_len={self.data.max_len} a training sequence may have; raise "
                              "model.max_len or lower data.max_len", field="model.max_len")
        # Every split the run will read, checked before any work: a misspelt test split would otherwise surface
        # only after training, when the final model is scored on it.
        if self.data.train_weights and self.train.length_buckets:  # whose shapes come from one epoch's pairs
            raise ConfigError("data.train_weights: not with train.length_buckets", field="data.train_weights")
        if self.data.subword_split and self.train.length_buckets:  # a split pair outgrows its bucket's shape
            raise ConfigError("data.subword_split: not with train.length_buckets (a split sentence outgrows its "
                              "bucket's fixed shape); set one of them to 0/null", field="data.subword_split")
        if self.data.dataset == LOCAL:  # the user's files: the test sets are the ones named in data.test_files
            for split in self.train.final_test_splits:
                if split not in self.data.test_files:
                    raise ConfigError(f"train.final_test_splits: {split!r} is not a test set of data.test_files "
                                      f"({', '.join(self.data.test_files) or 'none given'})",
                                      field="train.final_test_splits")
            return
        dataset = get_dataset(self.data.dataset)
        named = [("data.train_split", self.data.train_split), ("data.valid_split", self.data.valid_split),
                 ("data.test_split", self.data.test_split),
                 *(("train.final_test_splits", split) for split in self.train.final_test_splits)]
        for setting, split in named:
            try:
                dataset.resolve_split(split)
            except DataError as error:
                raise ConfigError(f"{setting}: {error}", field=setting) from None

    def settled(self) -> "RunConfig":
        """A copy nothing changes, once a run's corpus, clock fit and vocabulary are resolved: assigning raises. A
        settled config is its own."""
        if self.__dict__.get("_settled"):
            return self
        frozen = copy.deepcopy(self)
        settle(frozen.model, frozen.data, frozen.train, frozen)
        return frozen

    def to_dict(self) -> JsonObject:
        """The settings as config.yaml holds them: a section each."""
        return {
            "model": self.model.to_dict(),
            "data": _plain(dataclasses.asdict(self.data)),
            "train": _plain(dataclasses.asdict(self.train)),
        }

    def to_yaml(self) -> str:
        return yaml.safe_dump(self.to_dict(), sort_keys=False)

    @classmethod
    def from_dict(cls, values: object, source: str = "config") -> "RunConfig":
        """The config in ``values`` (a parsed config.yaml, not yet checked: anything YAML can hold), every section and
        setting checked; a problem is one ConfigError naming ``source`` and the setting."""
        if not isinstance(values, dict):
            raise ConfigError(f"{source}: expected sections model, data, train; got {type(values).__name__}")
        unknown = sorted(set(map(str, values)) - {"model", "data", "train"})
        if unknown:
            raise ConfigError(f"{source}: unknown section(s) {unknown}; expected model, data, train")
        sections = {}
        for name in ("model", "data", "train"):
            section = values.get(name) or {}
            if not isinstance(section, dict):
                raise ConfigError(f"{source}: section {name} must be a mapping of key: value, "
                                  f"got {type(section).__name__} {section!r:.40}", field=name)
            sections[name] = {str(key): value for key, value in section.items()}
        model_values = sections["model"]
        preset = model_values.pop("preset", None)
        try:
            model = ModelConfig.preset(str(preset), **model_values) if preset else ModelConfig.from_dict(model_values)
            return cls(model=model, data=_build(DataConfig, sections["data"], source),
                       train=_build(TrainConfig, sections["train"], source))
        except ConfigError as error:
            if str(error).startswith(source):
                raise
            raise ConfigError(f"{source}: {error}", field=error.field) from None


def _plain(values: Any) -> Any:
    """Settings as YAML writes them: tuples as lists, at any depth."""
    if isinstance(values, dict):
        return {key: _plain(value) for key, value in values.items()}
    if isinstance(values, (list, tuple)):
        return [_plain(value) for value in values]
    return values


# Settings that configure nothing, still found in the config.yaml of runs that set them: reading one drops it, so
# those runs resume and finalize. train.num_workers: batches are collated by the training process itself, one ahead
# of the device (training/data.py).
MEANINGLESS = {"train": ("num_workers",)}


def _build(cls: type, values: JsonObject, source: str) -> Any:
    values = {key: value for key, value in values.items() if key not in MEANINGLESS.get(cls.SECTION, ())}
    known = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(values) - known)
    if unknown:
        raise ConfigError(f"{source}: unknown setting(s) {', '.join(f'{cls.SECTION}.{k}' for k in unknown)}")
    return cls(**values)


def settings_of(entry: str) -> tuple[str, ...]:
    """The ``section.key=value`` items of one ``train.scale_up_models`` entry."""
    return tuple(entry.split())
