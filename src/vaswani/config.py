"""Typed configuration of the model architecture, with named presets.

Everything the architecture can vary lives in :class:`ModelConfig`; presets are plain functions of it, so
``ModelConfig.preset("base", positions="rope")`` reads the same in Python as ``--set model.positions=rope``
does on the command line. Its settings are checked by the one grammar of settings (vaswani/settings.py), whose
errors name the field (``model.n_heads``); the command line turns a field into the flag a user typed
(``vaswani.cli``).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, fields
from typing import Any, Literal

from vaswani.errors import ConfigError
from vaswani.settings import Limit, Settles, apply_overrides, parse_settings, validate_settings

Positions = Literal["sinusoidal", "learned", "rope", "none"]
NormPlacement = Literal["post", "pre"]
Activation = Literal["relu", "gelu"]
AttentionBackend = Literal["standard", "sdpa"]
EmbeddingTying = Literal["none", "decoder-output", "all-three"]


@dataclass
class ModelConfig(Settles):
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

    LIMITS = {
        "vocab_size": Limit(ge=1), "d_model": Limit(ge=1), "n_heads": Limit(ge=1), "n_encoder_layers": Limit(ge=1),
        "n_decoder_layers": Limit(ge=1), "d_ff": Limit(ge=1), "dropout": Limit(ge=0, lt=1),
        "attention_dropout": Limit(ge=0, lt=1), "max_len": Limit(ge=1),
        "sliding_window": Limit(ge=1), "pad_id": Limit(ge=0), "rope_base": Limit(gt=0),
    }

    def __post_init__(self) -> None:
        validate_settings(self)
        if self.d_model % self.n_heads:
            raise ConfigError(f"model.d_model={self.d_model} must be divisible by model.n_heads={self.n_heads}",
                              field="model.n_heads")
        if self.positions == "rope" and (self.d_model // self.n_heads) % 2:
            raise ConfigError("model.positions=rope needs an even head dimension (d_model / n_heads)",
                              field="model.positions")
        if self.pad_id >= self.vocab_size:
            raise ConfigError(f"model.pad_id={self.pad_id} must be below model.vocab_size={self.vocab_size}",
                              field="model.pad_id")

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads

    @classmethod
    def preset(cls, name: str, **overrides: Any) -> "ModelConfig":
        if name not in MODEL_PRESETS:
            raise ConfigError(f"unknown model preset {name!r}; choose from {sorted(MODEL_PRESETS)}")
        return cls.from_dict({**MODEL_PRESETS[name], **overrides})

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> "ModelConfig":
        if not isinstance(values, dict):
            raise ConfigError(f"model settings must be a mapping of name: value, got {type(values).__name__}")
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ConfigError(f"unknown model setting(s): {', '.join(unknown)}")
        return cls(**values)


DEFAULT_SLIDING_WINDOW = 50

MODEL_PRESETS: dict[str, dict[str, Any]] = {
    # Vaswani et al. "base" with a 50k shared vocabulary and 64-token sentences.
    "base": dict(),
    # Sized for a few CPU-hours on Multi30k: ~10M parameters with a 10k vocabulary.
    "small": dict(vocab_size=10_000, d_model=256, n_heads=4, n_encoder_layers=3, n_decoder_layers=3, d_ff=1024,
                  max_len=128),
    # For tests and smoke runs: seconds on a CPU.
    "tiny": dict(vocab_size=1_000, d_model=64, n_heads=4, n_encoder_layers=2, n_decoder_layers=2, d_ff=128,
                 max_len=128),
}


def apply_model_settings(config: ModelConfig, items: list[str]) -> ModelConfig:
    """``config`` with ``--set model.key=value`` items applied (commands that only build a model)."""
    return apply_overrides(config, parse_settings(items, ("model",))["model"], "model")


__all__ = ["DEFAULT_SLIDING_WINDOW", "MODEL_PRESETS", "ModelConfig", "apply_model_settings"]
