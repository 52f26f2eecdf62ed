"""Score adjustments applied at every search step, all tensorised over the (batch × beam) rows.

- length normalisation: GNMT's lp(Y) = ((5 + |Y|) / 6)^α (Wu et al. 2016), the power |Y|^α (OpenNMT's and
  CTranslate2's), or the plain average log-prob (the power with α = 1);
- repetition penalty (CTRL, Keskar et al. 2019): make tokens already generated less likely;
- no-repeat-n-gram blocking: forbid any n-gram from occurring twice in a hypothesis.

``generated`` is always (N, t): the tokens each row produced so far, without <s>. Every row is a live hypothesis
(search drops finished ones from the batch), so it holds no padding.
"""

from __future__ import annotations

import torch

from vaswani.decoding import engine
from vaswani.decoding.config import LengthNorm


def length_penalty(length: torch.Tensor | int, alpha: float, mode: LengthNorm) -> torch.Tensor:
    """The divisor of a hypothesis' summed log-prob, as a float tensor (see engine.length_penalty: the formula both
    engines use). ``length`` counts generated tokens including </s>."""
    return engine.length_penalty(torch.as_tensor(length, dtype=torch.float32), alpha, mode)


def normalise(log_prob: torch.Tensor, length: torch.Tensor | int, alpha: float, mode: LengthNorm) -> torch.Tensor:
    """Score used to rank finished hypotheses: log P(Y|X) / lp(|Y|)."""
    return log_prob / length_penalty(length, alpha, mode).to(log_prob.device)


def apply_repetition_penalty(logits: torch.Tensor, generated: torch.Tensor, theta: float) -> torch.Tensor:
    """CTRL repetition penalty on raw logits (N, V): for tokens already in ``generated`` (N, t), divide positive
    logits by θ and multiply negative ones by θ. Both move the logit down for θ > 1, so a repeated token always
    becomes less likely (dividing a negative logit would instead make it *more* likely)."""
    if theta == 1.0 or generated.size(1) == 0:
        return logits
    seen = torch.zeros_like(logits, dtype=torch.bool).scatter_(1, generated, True)  # (N, V)
    penalised = torch.where(logits > 0, logits / theta, logits * theta)
    return torch.where(seen, penalised, logits)


def block_repeated_ngrams(scores: torch.Tensor, generated: torch.Tensor, n: int) -> torch.Tensor:
    """Set to -inf every token that would complete an n-gram already present in ``generated`` (``scores`` (N, V):
    the logits, so that the softmax spreads the banned tokens' probability over the others).

    With prefix = the last n-1 generated tokens, a token w is banned when (prefix, w) occurred before: every
    earlier window of n tokens whose first n-1 equal the prefix bans its last token. All rows at once:
    windows (N, W, n) -> matches (N, W) -> a ban count per vocabulary entry via scatter_add.
    """
    t = generated.size(1)
    if n <= 0 or t < n:  # no complete n-gram yet
        return scores
    windows = generated.unfold(1, n, 1)  # (N, W, n) with W = t - n + 1 (all complete earlier n-grams)
    prefix = generated[:, t - (n - 1) :]  # (N, n-1); empty for n=1 (then every earlier token is banned)
    matches = (windows[:, :, : n - 1] == prefix[:, None, :]).all(dim=-1)  # (N, W)
    banned = torch.zeros_like(scores, dtype=torch.int32)
    banned.scatter_add_(1, windows[:, :, n - 1], matches.to(torch.int32))  # duplicates add up instead of racing
    return scores.masked_fill(banned > 0, float("-inf"))
