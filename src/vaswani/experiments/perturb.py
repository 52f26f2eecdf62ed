"""Source-side perturbations of the robustness experiment (shuffled, dropped and repeated tokens, as the robustness
claim is framed), on BPE ids.

Each takes the ids of one source sentence (without ``</s>``, which the collate step appends) and a numpy
Generator, and returns new ids; the input is never modified. The counts are ``round(fraction · n)``, so very short
sentences may stay unchanged (a 2-token sentence has no token to drop at 20 %).
"""

from __future__ import annotations

from typing import Callable

import numpy as np

CONDITIONS = ("control", "shuffle", "drop", "repeat")
DESCRIPTIONS = {
    "control": "no perturbation",
    "shuffle": "the middle 50 % of tokens, centred on the midpoint, randomly permuted",
    "drop": "20 % of tokens replaced by padding (masked out; the other tokens keep their positions)",
    "repeat": "20 % of tokens duplicated into the adjacent position (inserted right after; the sentence grows)",
}


def shuffle_middle(ids: np.ndarray, rng: np.random.Generator, fraction: float = 0.5) -> np.ndarray:
    """Permute the ``fraction · n`` tokens centred on the sentence's midpoint; the ends stay in place."""
    out = np.array(ids, copy=True)
    width = int(round(fraction * len(out)))
    start = (len(out) - width) // 2
    out[start : start + width] = rng.permutation(out[start : start + width])
    return out


def drop_tokens(ids: np.ndarray, rng: np.random.Generator, pad_id: int, fraction: float = 0.2) -> np.ndarray:
    """Replace ``fraction · n`` randomly chosen tokens by padding, which the encoder masks out."""
    out = np.array(ids, copy=True)
    count = int(round(fraction * len(out)))
    out[rng.choice(len(out), size=count, replace=False)] = pad_id
    return out


def repeat_tokens(ids: np.ndarray, rng: np.random.Generator, fraction: float = 0.2) -> np.ndarray:
    """Duplicate ``fraction · n`` randomly chosen tokens: each copy is inserted right after its original."""
    count = int(round(fraction * len(ids)))
    chosen = rng.choice(len(ids), size=count, replace=False)
    return np.insert(np.asarray(ids), np.sort(chosen) + 1, np.asarray(ids)[np.sort(chosen)])


def perturbation(condition: str, pad_id: int) -> Callable[[np.ndarray, np.random.Generator], np.ndarray]:
    if condition == "control":
        return lambda ids, rng: np.array(ids, copy=True)
    if condition == "shuffle":
        return shuffle_middle
    if condition == "drop":
        return lambda ids, rng: drop_tokens(ids, rng, pad_id)
    if condition == "repeat":
        return repeat_tokens
    raise ValueError(f"unknown perturbation {condition!r}; choose from {', '.join(CONDITIONS)}")


def perturb_all(sources: list[np.ndarray], condition: str, seed: int, pad_id: int) -> list[np.ndarray]:
    """The condition applied to every sentence with one Generator seeded by (seed, condition): the same
    sentences get the same perturbation in every model's evaluation, and on every machine."""
    rng = np.random.default_rng([seed, CONDITIONS.index(condition)])
    apply = perturbation(condition, pad_id)
    return [apply(ids, rng) for ids in sources]
