"""What a search does, as one dataclass (no torch import: the command line builds it cheaply)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from vaswani.config import Limit, Precision, validate_settings
from vaswani.errors import ConfigError

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

    SECTION = "search"
    LIMITS = {
        "beam_size": Limit(ge=1), "nbest": Limit(ge=1), "alpha": Limit(ge=0), "max_len_a": Limit(ge=0),
        "max_len_b": Limit(ge=0), "repetition_penalty": Limit(gt=0), "no_repeat_ngram": Limit(ge=0),
        "bos_id": Limit(ge=0), "eos_id": Limit(ge=0), "pad_id": Limit(ge=0),
    }

    def __post_init__(self) -> None:
        validate_settings(self)  # types, length_norm choices, finite numbers, LIMITS
        if self.nbest > self.beam_size:
            raise ConfigError(f"search.nbest={self.nbest} must be at most search.beam_size={self.beam_size}",
                              field="search.nbest")
