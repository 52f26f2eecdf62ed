"""Scoring given translations (force decoding): each pair's log-probability under the model, for filtering a
corpus or reranking candidates.

An engine gives the log-probability of every target token and of the </s> that ends it
(:meth:`~vaswani.decoding.engine.Engine.score`: the torch engine in one teacher-forced pass, CTranslate2
with ``score_batch``); a :class:`PairScore` sums them and normalises the sum as the search ranks its
hypotheses, so a pair scores what the search would give the same output. This module imports no torch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from vaswani.decoding.config import SearchConfig
from vaswani.decoding.engine import length_penalty
from vaswani.errors import VaswaniError


class UnscorableText(VaswaniError):
    """A source or target that cannot be scored (blank, or longer than the model takes): which side (0 source,
    1 target) and which line (from 0), for a caller that names them its own way (the server's fields)."""

    def __init__(self, message: str, side: int, index: int):
        super().__init__(message)
        self.side, self.index = side, index


@dataclass
class PairScore:
    log_prob: float  # summed log-prob of the target's tokens and its </s>
    tokens: int  # target tokens, </s> included
    per_token: float  # log_prob / tokens: the mean log-prob of a token
    score: float  # log_prob / lp(tokens): length-normalised as the search ranks hypotheses

    def as_dict(self) -> dict[str, float | int]:
        return {"score": self.score, "log_prob": self.log_prob, "per_token": self.per_token,
                "tokens": self.tokens}


def pair_score(token_log_probs: Sequence[float], config: SearchConfig) -> PairScore:
    """The score of one pair from the log-probs of its target tokens (</s> included, so never empty),
    normalised by ``config``'s length penalty."""
    tokens = len(token_log_probs)
    log_prob = float(sum(token_log_probs))
    normalised = log_prob / length_penalty(tokens, config.alpha, config.length_norm)
    return PairScore(log_prob, tokens, log_prob / tokens, normalised)
