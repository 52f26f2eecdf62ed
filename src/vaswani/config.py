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
    dropout: float = 0.1  # residual and embedding dropout (the paper's P_drop), and inside the feed-forward
    # Dropout on the attention weights: not in the paper (section 5.4 drops residuals and embeddings only) and
    # off in MarianMT. On a CPU it also costs a random mask over every (B, H, Q, K) score matrix and moves SDPA off
    # its fused kernel (`vaswani bench train`), so it is off unless asked for.
    attention_dropout: float = 0.0
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
        for name in ("dropout", "attention_dropout"):
            if not 0.0 <= getattr(self, name) < 1.0:
                raise ConfigError(f"model.{name} must be in [0, 1), got {getattr(self, name)}")

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
    """Coerce every field of a config dataclass to its declared type and check ``Literal`` choices.

    YAML and the command line give strings ("3e-4", "none", "true"); this turns them into the declared
    float/int/bool/None/tuple or raises a ConfigError that names ``section.field``.
    """
    hints = get_type_hints(type(obj))
    section = getattr(type(obj), "SECTION", "model")
    for f in fields(obj):
        value = getattr(obj, f.name)
        try:
            coerced = _coerce(value, hints[f.name])
        except (TypeError, ValueError):
            raise ConfigError(f"{section}.{f.name}={value!r} is not a valid {_type_name(hints[f.name])}") from None
        object.__setattr__(obj, f.name, coerced)
        allowed = _literal_choices(hints[f.name])
        if allowed and coerced not in allowed:
            raise ConfigError(f"{section}.{f.name}={coerced!r} is not one of {list(allowed)}")


def _literal_choices(tp: Any) -> tuple[Any, ...]:
    if getattr(tp, "__origin__", None) is Literal:
        return get_args(tp)
    return ()


def _type_name(tp: Any) -> str:
    return getattr(tp, "__name__", None) or str(tp).replace("typing.", "")


def _coerce(value: Any, tp: Any) -> Any:
    args = get_args(tp)
    if type(None) in args:  # Optional[X]
        if value is None or (isinstance(value, str) and value.strip().lower() in {"none", "null", ""}):
            return None
        inner = [a for a in args if a is not type(None)]
        return _coerce(value, inner[0]) if len(inner) == 1 else value
    if getattr(tp, "__origin__", None) is Literal:
        return value
    if tp is bool:
        if isinstance(value, str):
            lowered = value.strip().lower()
            if lowered not in {"true", "false", "1", "0", "yes", "no"}:
                raise ValueError(value)
            return lowered in {"true", "1", "yes"}
        return bool(value)
    if tp is int:
        if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
            raise ValueError(value)
        return int(value)
    if tp is float:
        if isinstance(value, bool):
            raise ValueError(value)
        return float(value)
    if tp is str:
        return str(value)
    if getattr(tp, "__origin__", None) is tuple:
        if isinstance(value, str):
            value = [v for v in value.strip("()[] ").split(",") if v.strip()]
        return tuple(_coerce(v, t) for v, t in zip(value, args, strict=True))
    return value


def apply_overrides(obj: Any, overrides: dict[str, str], section: str) -> Any:
    """Return a copy of dataclass ``obj`` with string overrides; its __post_init__ coerces them to each field's
    declared type (see :func:`validate_literals`)."""
    names = {f.name for f in fields(obj)}
    changes = {}
    for key, raw in overrides.items():
        if key not in names:
            raise ConfigError(f"unknown setting {section}.{key}; known: {', '.join(sorted(names))}")
        changes[key] = raw
    return dataclasses.replace(obj, **changes)


__all__ = [
    "ModelConfig",
    "MODEL_PRESETS",
    "ConfigError",
    "DEFAULT_SLIDING_WINDOW",
    "apply_overrides",
    "validate_literals",
]
