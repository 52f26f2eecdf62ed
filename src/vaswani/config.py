"""Typed configuration of the model architecture, with named presets.

Everything the architecture can vary lives in :class:`ModelConfig`; presets are plain functions of it, so
``ModelConfig.preset("base", positions="rope")`` reads the same in Python as ``--set model.positions=rope``
does on the command line.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, fields
from typing import Any, Literal, get_args, get_type_hints

from vaswani.errors import ConfigError

Positions = Literal["sinusoidal", "learned", "rope", "none"]
NormPlacement = Literal["post", "pre"]
Activation = Literal["relu", "gelu"]
AttentionBackend = Literal["standard", "sdpa"]
EmbeddingTying = Literal["none", "decoder-output", "all-three"]


@dataclass
class ModelConfig:
    vocab_size: int = 50_000  # one vocabulary shared by source and target (shared BPE)
    d_model: int = 512
    n_heads: int = 8
    n_encoder_layers: int = 6
    n_decoder_layers: int = 6
    d_ff: int = 2048
    dropout: float = 0.1
    max_len: int = 64  # longest sequence (tokens, incl. <s>/</s>) the learned/sinusoidal tables cover
    positions: Positions = "sinusoidal"
    norm: NormPlacement = "post"
    activation: Activation = "relu"
    attention: AttentionBackend = "sdpa"
    sliding_window: int | None = None  # None = full attention; k = self-attention sees a band of k keys
    tie_embeddings: EmbeddingTying = "all-three"
    scale_embeddings: bool = True  # multiply token embeddings by sqrt(d_model), as in the paper
    pad_id: int = 0
    rope_base: float = 10_000.0

    def __post_init__(self) -> None:
        validate_literals(self)
        if self.d_model % self.n_heads:
            raise ConfigError(f"model.d_model={self.d_model} must be divisible by model.n_heads={self.n_heads}")
        if self.positions == "rope" and (self.d_model // self.n_heads) % 2:
            raise ConfigError("model.positions=rope needs an even head dimension (d_model / n_heads)")
        if self.sliding_window is not None and self.sliding_window < 1:
            raise ConfigError(f"model.sliding_window must be >= 1 or None, got {self.sliding_window}")
        if not 0.0 <= self.dropout < 1.0:
            raise ConfigError(f"model.dropout must be in [0, 1), got {self.dropout}")

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads

    @classmethod
    def preset(cls, name: str, **overrides: Any) -> "ModelConfig":
        if name not in MODEL_PRESETS:
            raise ConfigError(f"unknown model preset {name!r}; choose from {sorted(MODEL_PRESETS)}")
        values = {**MODEL_PRESETS[name], **overrides}
        return cls(**values)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> "ModelConfig":
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ConfigError(f"unknown model setting(s): {', '.join(unknown)}")
        return cls(**values)


DEFAULT_SLIDING_WINDOW = 50

MODEL_PRESETS: dict[str, dict[str, Any]] = {
    # The seeds' model: Vaswani et al. "base" with a 50k shared vocabulary and 64-token sentences.
    "base": dict(),
    # Sized for a few CPU-hours on Multi30k: ~10M parameters with a 10k vocabulary.
    "small": dict(vocab_size=10_000, d_model=256, n_heads=4, n_encoder_layers=3, n_decoder_layers=3, d_ff=1024,
                  max_len=128),
    # For tests and smoke runs: seconds on a CPU.
    "tiny": dict(vocab_size=1_000, d_model=64, n_heads=4, n_encoder_layers=2, n_decoder_layers=2, d_ff=128,
                 max_len=128),
}


def validate_literals(obj: Any) -> None:
    """Check every ``Literal[...]``-typed field of a dataclass against its allowed values."""
    hints = get_type_hints(type(obj))
    for f in fields(obj):
        allowed = _literal_choices(hints[f.name])
        value = getattr(obj, f.name)
        if allowed and value not in allowed:
            section = getattr(type(obj), "SECTION", "model")
            raise ConfigError(f"{section}.{f.name}={value!r} is not one of {list(allowed)}")


def _literal_choices(tp: Any) -> tuple[Any, ...]:
    args = get_args(tp)
    if args and all(isinstance(a, (str, int, bool)) for a in args) and getattr(tp, "__origin__", None) is Literal:
        return args
    return ()


def parse_value(raw: str, tp: Any) -> Any:
    """Turn a command-line string into the type a dataclass field declares (``--set key=value``)."""
    import yaml

    value = yaml.safe_load(raw)
    origin_args = get_args(tp)
    if tp is float and isinstance(value, int):
        return float(value)
    if type(None) in origin_args and (value is None or str(raw).lower() in {"none", "null"}):
        return None
    if float in origin_args and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if tp is str or (getattr(tp, "__origin__", None) is Literal):
        return str(raw) if not isinstance(value, str) else value
    return value


def apply_overrides(obj: Any, overrides: dict[str, str], section: str) -> Any:
    """Return a copy of dataclass ``obj`` with string overrides parsed to each field's type."""
    hints = get_type_hints(type(obj))
    names = {f.name for f in fields(obj)}
    changes = {}
    for key, raw in overrides.items():
        if key not in names:
            raise ConfigError(f"unknown setting {section}.{key}; known: {', '.join(sorted(names))}")
        changes[key] = parse_value(raw, hints[key])
    return dataclasses.replace(obj, **changes)


__all__ = [
    "ModelConfig",
    "MODEL_PRESETS",
    "ConfigError",
    "DEFAULT_SLIDING_WINDOW",
    "apply_overrides",
    "parse_value",
    "validate_literals",
]
