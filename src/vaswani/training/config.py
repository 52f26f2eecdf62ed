"""Run configuration: model + data + training settings, named YAML presets, and ``--set section.key=value``.

A preset file (``src/vaswani/configs/NAME.yaml``) has three sections; ``model.preset`` picks a ModelConfig
preset that the other ``model`` keys then override::

    model: {preset: small, positions: sinusoidal}
    data:  {dataset: multi30k, vocab_size: 8000}
    train: {max_tokens: 4096, max_epochs: 20}
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, Literal

import yaml

from vaswani.config import ModelConfig, Precision, apply_overrides, parse_settings, validate_literals
from vaswani.errors import ConfigError


@dataclass
class DataConfig:
    SECTION = "data"
    dataset: str = "multi30k"
    direction: Literal["de-en", "en-de"] = "de-en"
    train_split: str = "train"
    valid_split: str = "val"
    test_split: str = "test2016"
    vocab_size: int = 8000  # BPE merges target; the model's vocab_size follows the trained tokenizer
    max_len: int = 64  # pairs with a longer side (in tokens incl. <s>/</s>) are dropped, as in the reference setups
    data_dir: str | None = None  # default: $VASWANI_DATA, then the download cache

    def __post_init__(self) -> None:
        validate_literals(self)


@dataclass
class TrainConfig:
    SECTION = "train"
    seed: int = 0
    # batches
    max_tokens: int = 4096  # token budget per batch (padded size of the bigger side)
    grad_accum: int = 1
    num_workers: int = 0
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
    clip_grad_norm: float | None = 1.0
    # precision and speed
    precision: Precision = "auto"  # auto: bf16 where supported, else fp16/fp32
    compile: bool = False
    device: str = "auto"
    num_threads: int | None = None  # CPU threads for intra-op parallelism (None: PyTorch's default, one per core)
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

    def __post_init__(self) -> None:
        validate_literals(self)
        if self.max_epochs is None and self.max_steps is None:
            raise ConfigError("train.max_epochs and train.max_steps are both unset: the run would never end")
        if self.grad_accum < 1:
            raise ConfigError(f"train.grad_accum must be >= 1, got {self.grad_accum}")


@dataclass
class RunConfig:
    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    train: TrainConfig = field(default_factory=TrainConfig)

    def to_dict(self) -> dict[str, Any]:
        return {
            "model": self.model.to_dict(),
            "data": _plain(dataclasses.asdict(self.data)),
            "train": _plain(dataclasses.asdict(self.train)),
        }

    def to_yaml(self) -> str:
        return yaml.safe_dump(self.to_dict(), sort_keys=False)

    @classmethod
    def from_dict(cls, values: dict[str, Any], source: str = "config") -> "RunConfig":
        unknown = sorted(set(values) - {"model", "data", "train"})
        if unknown:
            raise ConfigError(f"{source}: unknown section(s) {unknown}; expected model, data, train")
        model_values = dict(values.get("model") or {})
        preset = model_values.pop("preset", None)
        model = ModelConfig.preset(preset, **model_values) if preset else ModelConfig.from_dict(model_values)
        return cls(
            model=model,
            data=_build(DataConfig, values.get("data") or {}, source),
            train=_build(TrainConfig, values.get("train") or {}, source),
        )


def _plain(values: dict[str, Any]) -> dict[str, Any]:
    return {k: list(v) if isinstance(v, tuple) else v for k, v in values.items()}


def _build(cls: type, values: dict[str, Any], source: str) -> Any:
    known = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(values) - known)
    if unknown:
        raise ConfigError(f"{source}: unknown setting(s) {', '.join(f'{cls.SECTION}.{k}' for k in unknown)}")
    return cls(**values)


def preset_names() -> list[str]:
    return sorted(p.name[: -len(".yaml")] for p in resources.files("vaswani.configs").iterdir()
                  if p.name.endswith(".yaml"))


def load_preset(name_or_path: str) -> RunConfig:
    """A preset name (``multi30k-cpu``) or the path of a YAML file of the same shape."""
    path = Path(name_or_path)
    if path.suffix in {".yaml", ".yml"} and path.is_file():
        text, source = path.read_text(), str(path)
    else:
        candidate = resources.files("vaswani.configs") / f"{name_or_path}.yaml"
        if not candidate.is_file():
            raise ConfigError(f"unknown preset {name_or_path!r}; choose from {preset_names()} or give a YAML file")
        text, source = candidate.read_text(), f"preset {name_or_path}"
    try:
        values = yaml.safe_load(text) or {}
    except yaml.YAMLError as error:
        raise ConfigError(f"{source}: invalid YAML ({error})") from None
    return RunConfig.from_dict(values, source)


def apply_settings(config: RunConfig, settings: list[str]) -> RunConfig:
    """Apply ``section.key=value`` strings; an unknown section or key is an error that names it."""
    grouped = parse_settings(settings, ("model", "data", "train"))
    return RunConfig(
        model=apply_overrides(config.model, grouped["model"], "model"),
        data=apply_overrides(config.data, grouped["data"], "data"),
        train=apply_overrides(config.train, grouped["train"], "train"),
    )
