"""Length normalisation, the CTRL repetition penalty and no-repeat-n-gram blocking, on hand-written tensors."""

from __future__ import annotations

import pytest
import torch

from vaswani.decoding.penalties import apply_repetition_penalty, block_repeated_ngrams, length_penalty, normalise


def test_gnmt_length_penalty_formula() -> None:
    assert length_penalty(5, 0.6, "gnmt").item() == pytest.approx(((5 + 5) / 6) ** 0.6)
    assert length_penalty(1, 0.0, "gnmt").item() == 1.0  # α = 0: no normalisation
    assert length_penalty(7, 0.6, "average").item() == 7.0
    assert length_penalty(7, 0.6, "none").item() == 1.0
    assert normalise(torch.tensor([-6.0]), 3, 1.0, "gnmt").item() == pytest.approx(-6.0 / (8 / 6))


def test_repetition_penalty_divides_positive_and_multiplies_negative_logits() -> None:
    logits = torch.tensor([[2.0, -1.0, 0.5, -3.0, 1.0]])
    generated = torch.tensor([[0, 1, 1]])  # tokens 0 (positive logit) and 1 (negative logit) were generated
    out = apply_repetition_penalty(logits, generated, theta=2.0)
    assert out.tolist() == [[1.0, -2.0, 0.5, -3.0, 1.0]]  # 2/2, -1*2; unseen tokens untouched
    before, after = logits.softmax(-1), out.softmax(-1)
    assert after[0, 0] < before[0, 0] and after[0, 1] < before[0, 1]  # both repeated tokens lost probability
    assert (after[0, 2:] > before[0, 2:]).all()  # the rest gained it


def test_repetition_penalty_is_per_row_and_off_at_one() -> None:
    logits = torch.tensor([[1.0, 1.0], [1.0, 1.0]])
    out = apply_repetition_penalty(logits, torch.tensor([[0], [1]]), theta=4.0)
    assert out.tolist() == [[0.25, 1.0], [1.0, 0.25]]
    assert apply_repetition_penalty(logits, torch.tensor([[0], [1]]), theta=1.0) is logits


@pytest.mark.parametrize(
    "generated, n, banned",
    [
        ([4, 5, 4], 2, {5}),  # "4 5" exists and the prefix is 4
        ([4, 5, 4], 1, {4, 5}),  # n = 1: no token twice
        ([4, 5, 6, 4, 5], 3, {6}),  # "4 5 6" exists and the prefix is "4 5"
        ([4, 5, 6, 4, 5], 2, {6}),  # "5 6" exists and the prefix is 5
        ([4, 4, 4], 2, {4}),
        ([4, 5], 3, set()),  # no complete 3-gram yet
        ([4, 5, 6, 7], 2, set()),  # prefix 7 never occurred before
    ],
)
def test_no_repeat_ngram_bans_exactly_the_completing_tokens(generated: list[int], n: int, banned: set) -> None:
    log_probs = torch.zeros(1, 8)
    out = block_repeated_ngrams(log_probs, torch.tensor([generated]), n)
    assert {i for i in range(8) if out[0, i] == float("-inf")} == banned


def test_no_repeat_ngram_rows_are_independent() -> None:
    generated = torch.tensor([[4, 5, 4], [5, 4, 6]])
    out = block_repeated_ngrams(torch.zeros(2, 8), generated, 2)
    assert torch.isinf(out[0]).nonzero().flatten().tolist() == [5]
    assert not torch.isinf(out[1]).any()


@pytest.mark.parametrize("settings, summary", [
    ({"beam_size": 1}, "greedy"),
    ({"beam_size": 5, "length_norm": "gnmt", "alpha": 0.6}, "beam 5, gnmt α=0.6"),
    ({"beam_size": 5, "length_norm": "power", "alpha": 1.5, "no_repeat_ngram": 3},
     "beam 5, power α=1.5, no-repeat-3-gram"),
    ({"beam_size": 4, "length_norm": "average", "repetition_penalty": 1.2}, "beam 4, average, repetition penalty 1.2"),
    ({"beam_size": 4, "length_norm": "none"}, "beam 4"),
    ({"beam_size": 1, "sample": True, "top_k": 10, "nbest": 2}, "sampling (top-k 10, top-p 1, temperature 1)"),
])
def test_a_search_is_summarised_by_the_settings_that_change_its_output(settings: dict, summary: str) -> None:
    from vaswani.decoding.config import SearchConfig

    assert SearchConfig(**settings).summary() == summary
