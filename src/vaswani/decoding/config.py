"""What a search does, as one dataclass (no torch import: the command line builds it cheaply)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from vaswani.errors import ConfigError
from vaswani.config import PRECISIONS, Precision

LengthNorm = Literal["gnmt", "average", "none"]


@dataclass
class SearchConfig:
    """How to search. ``beam_size=1`` is greedy search."""

    beam_size: int = 4
    nbest: int = 1  # hypotheses returned per sentence, best first (at most beam_size)
    length_norm: LengthNorm = "gnmt"  # rank finished hypotheses by log P / lp(|Y|)
    alpha: float = 0.6  # GNMT exponent; 0.6 is the paper's (Vaswani et al. §6.1) value
    max_len_a: float = 1.5  # output length limit = a * source length + b (tokens, </s> included) ...
    max_len_b: int = 10  # ... capped at model.max_len when positions are learned
    repetition_penalty: float = 1.0  # CTRL θ; 1.0 = off, >1 discourages repeating generated tokens
    no_repeat_ngram: int = 0  # forbid any n-gram from occurring twice; 0 = off
    allow_eos: bool = True  # False: always decode to the length limit (fixed-length speed measurements)
    precision: Precision = "auto"  # autocast around the model (search arithmetic stays float32); see precision.py
    bos_id: int = 1
    eos_id: int = 2
    pad_id: int = 0

    def __post_init__(self) -> None:
        if self.beam_size < 1:
            raise ConfigError(f"search.beam_size must be >= 1, got {self.beam_size}")
        if not 1 <= self.nbest <= self.beam_size:
            raise ConfigError(f"search.nbest must be between 1 and beam_size={self.beam_size}, got {self.nbest}")
        if self.length_norm not in ("gnmt", "average", "none"):
            raise ConfigError(f"search.length_norm must be gnmt, average or none, got {self.length_norm!r}")
        if self.precision not in PRECISIONS:
            raise ConfigError(f"search.precision must be one of {', '.join(PRECISIONS)}, got {self.precision!r}")
        if self.alpha < 0:
            raise ConfigError(f"search.alpha must be >= 0, got {self.alpha}")
        if self.repetition_penalty <= 0:
            raise ConfigError(f"search.repetition_penalty must be > 0, got {self.repetition_penalty}")
        if self.no_repeat_ngram < 0:
            raise ConfigError(f"search.no_repeat_ngram must be >= 0, got {self.no_repeat_ngram}")
        if self.max_len_a < 0 or self.max_len_b < 0:
            raise ConfigError(f"search.max_len_a and max_len_b must be >= 0, got {self.max_len_a}, {self.max_len_b}")
