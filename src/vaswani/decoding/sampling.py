"""Sampling a translation instead of searching for the most probable one: each token is drawn from the
model's next-token distribution, sharpened or flattened by a temperature and cut to its ``top_k`` most
probable tokens or its smallest "nucleus" of probability ``top_p`` (Holtzman et al. 2020). Back-translation
samples its synthetic sources (Edunov et al. 2018: sampled back-translations train better models than
beam-searched ones).

A :class:`Sampler` is what greedy search's loop calls in place of its argmax; a seeded generator makes a
sampled translation reproducible (the same seed, input and batching give the same output).
"""

from __future__ import annotations

import torch

from vaswani.decoding.config import SearchConfig

NEG_INF = float("-inf")


class Sampler:
    def __init__(self, config: SearchConfig, device: torch.device):
        self.temperature, self.top_k, self.top_p = config.temperature, config.top_k, config.top_p
        self.generator = torch.Generator(device=device).manual_seed(config.seed)

    def pick(self, log_probs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(N, V) log-probs (every penalty applied) -> each row's drawn token's log-prob and the token. The
        log-prob is the model's, not the tempered one's: a sampled output is scored as any other."""
        scores = log_probs / self.temperature
        if 0 < self.top_k < scores.size(-1):
            kth = scores.topk(self.top_k, dim=-1).values[:, -1:]
            scores = scores.masked_fill(scores < kth, NEG_INF)
        if self.top_p < 1.0:
            ordered, order = scores.sort(dim=-1, descending=True)
            probs = torch.softmax(ordered, dim=-1)
            # A token stays while the tokens before it hold less than top_p: the most probable always stays.
            outside = probs.cumsum(dim=-1) - probs >= self.top_p
            scores = torch.full_like(scores, NEG_INF).scatter(1, order, ordered.masked_fill(outside, NEG_INF))
        tokens = torch.multinomial(torch.softmax(scores, dim=-1), 1, generator=self.generator).squeeze(1)
        return log_probs.gather(1, tokens[:, None]).squeeze(1), tokens
