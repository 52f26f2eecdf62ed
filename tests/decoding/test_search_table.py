"""Search on a hand-built model whose next-token distribution is a fixed table, so the right answer is known.

The fake model offers the same interface as the Transformer (``start_decoding`` / ``decode_step`` /
``state.reorder`` / ``state.reorder_beams``); its probabilities depend only on the tokens generated so far.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import pytest
import torch

from vaswani.decoding import SearchConfig, beam_search, generate, greedy_search

PAD, BOS, EOS = 0, 1, 2
A, B, C, D = 4, 5, 6, 7
VOCAB = 8
OTHER = 1e-6  # probability of every token the table does not list


@dataclass
class TableState:
    prefix: torch.Tensor  # (N, t) tokens fed so far, <s> first
    step: int = 0

    def reorder(self, index: torch.Tensor) -> "TableState":
        return TableState(self.prefix.index_select(0, index), self.step)

    def reorder_beams(self, rows: torch.Tensor, sentences: torch.Tensor | None) -> "TableState":
        return self.reorder(rows)  # nothing is shared by a sentence's beams


class TableModel:
    """P(next | generated) from ``table``: tuple of generated tokens -> {token: probability}. Prefixes the table
    does not list end: </s> with probability ~1."""

    def __init__(self, table: dict[tuple[int, ...], dict[int, float]]):
        self.table = table
        self.steps = 0  # decode_step calls, to see early stopping

    def start_decoding(self, src: torch.Tensor, capacity: int | None = None) -> TableState:
        return TableState(src.new_empty(src.size(0), 0))

    def decode_step(self, tokens: torch.Tensor, state: TableState) -> torch.Tensor:
        self.steps += 1
        state.prefix = torch.cat((state.prefix, tokens[:, None]), dim=1)
        probs = torch.full((tokens.size(0), VOCAB), OTHER)
        for row, prefix in enumerate(state.prefix.tolist()):
            for token, p in self.table.get(tuple(prefix[1:]), {EOS: 1.0}).items():
                probs[row, token] = p
        state.step += 1
        return probs.log()  # logits: log_softmax renormalises the tiny OTHER mass away


def exact_ranking(table: dict, max_len: int, alpha: float = 0.0, norm: str = "none") -> list[tuple[tuple, float]]:
    """Brute force: every complete output of at most ``max_len`` tokens with its normalised score, best first."""

    def log_p(prefix: tuple, token: int) -> float:  # what TableModel's logits give after log-softmax
        probs = [OTHER] * VOCAB
        for t, p in table.get(prefix, {EOS: 1.0}).items():
            probs[t] = p
        return math.log(probs[token] / sum(probs))

    results = []
    for length in range(1, max_len + 1):
        for body in itertools.product(range(3, VOCAB), repeat=length - 1):
            seq = body + (EOS,)
            log_prob = sum(log_p(seq[:i], seq[i]) for i in range(length))
            lp = {"none": 1.0, "average": length, "gnmt": ((5 + length) / 6) ** alpha}[norm]
            results.append((body, log_prob / lp))
    return sorted(results, key=lambda r: -r[1])


SRC = torch.tensor([[9, 9, EOS]])  # the table ignores the source; 3 tokens -> limit a*3 + b

# Greedy takes A (0.5) and ends with A C (0.5 * 0.4 = 0.2); B C (0.4 * 0.9 = 0.36) is the best sequence.
GREEDY_MISSES = {
    (): {A: 0.5, B: 0.4, EOS: 0.1},
    (A,): {C: 0.4, D: 0.3, EOS: 0.3},
    (B,): {C: 0.9, EOS: 0.1},
}


def _config(**overrides) -> SearchConfig:
    values = dict(beam_size=2, length_norm="none", max_len_a=0.0, max_len_b=4)
    return SearchConfig(**{**values, **overrides})


def test_beam_search_finds_the_exact_best_sequence_that_greedy_misses() -> None:
    best, best_score = exact_ranking(GREEDY_MISSES, max_len=4)[0]
    assert best == (B, C)
    greedy = greedy_search(TableModel(GREEDY_MISSES), SRC, _config(beam_size=1))[0][0]
    beam = beam_search(TableModel(GREEDY_MISSES), SRC, _config())[0][0]
    assert greedy.tokens == [A, C]
    assert beam.tokens == [B, C]
    assert beam.score == pytest.approx(best_score, abs=1e-5)
    assert beam.log_prob == pytest.approx(math.log(0.4 * 0.9 * 1.0), abs=1e-4)


def test_beam_of_one_is_greedy_on_the_table() -> None:
    greedy = greedy_search(TableModel(GREEDY_MISSES), SRC, _config(beam_size=1))
    beam = beam_search(TableModel(GREEDY_MISSES), SRC, _config(beam_size=1))
    assert beam[0][0].tokens == greedy[0][0].tokens
    assert beam[0][0].score == pytest.approx(greedy[0][0].score)


def test_nbest_lists_the_best_hypotheses_with_scores_in_order() -> None:
    # A beam as wide as every live prefix is exhaustive, so the n-best equals the brute-force ranking.
    exact = exact_ranking(GREEDY_MISSES, max_len=3)[:3]
    nbest = generate(TableModel(GREEDY_MISSES), SRC, _config(beam_size=6, nbest=3, max_len_b=3))[0]
    assert [tuple(h.tokens) for h in nbest] == [seq for seq, _ in exact]
    assert [h.score for h in nbest] == pytest.approx([score for _, score in exact], abs=1e-5)
    assert [h.score for h in nbest] == sorted((h.score for h in nbest), reverse=True)


# "A" ends at once (0.55 * 0.9 = 0.495, 2 tokens with </s>); B C D is longer and less probable in total
# (0.45 * 0.99^3 = 0.437, 4 tokens) but more probable per token. The other path, A C C …, keeps the second beam
# busy without ending (a beam of 2 with both slots finished would stop before B C D ends).
SHORT_VS_LONG = {
    (): {A: 0.55, B: 0.45},
    (A,): {EOS: 0.9, C: 0.1},
    (A, C): {C: 0.99, EOS: 0.01},
    (A, C, C): {C: 0.99, EOS: 0.01},
    (B,): {C: 0.99, EOS: 0.01},
    (B, C): {D: 0.99, EOS: 0.01},
    (B, C, D): {EOS: 0.99, A: 0.01},
}


@pytest.mark.parametrize(
    "norm, alpha, winner",
    [("none", 0.0, [A]), ("gnmt", 0.0, [A]), ("gnmt", 1.0, [B, C, D]), ("average", 0.0, [B, C, D])],
)
def test_length_normalisation_changes_the_winner(norm: str, alpha: float, winner: list[int]) -> None:
    best = generate(TableModel(SHORT_VS_LONG), SRC, _config(length_norm=norm, alpha=alpha, max_len_b=5))[0][0]
    assert best.tokens == winner
    assert tuple(best.tokens) == exact_ranking(SHORT_VS_LONG, 5, alpha, norm)[0][0]


def test_finished_hypotheses_keep_their_score_and_search_stops_early() -> None:
    # Unnormalised: once "A </s>" (0.495) has ended, no live beam (best: B C, 0.446) can beat it -> stop after
    # 2 steps instead of running to the limit of 5.
    model = TableModel(SHORT_VS_LONG)
    best = beam_search(model, SRC, _config(length_norm="none", max_len_b=5))[0][0]
    assert best.tokens == [A]
    assert best.log_prob == pytest.approx(math.log(0.55 * 0.9), abs=1e-4)
    assert model.steps == 2


def test_length_limit_forces_an_end() -> None:
    looping = {(): {A: 0.9, EOS: 0.1}, **{(A,) * n: {A: 0.9, EOS: 0.1} for n in range(1, 10)}}
    for beam in (1, 3):
        hyps = generate(TableModel(looping), SRC, _config(beam_size=beam, nbest=1, max_len_a=1.0, max_len_b=1))[0]
        assert len(hyps[0].tokens) + 1 <= 4  # a * 3 source tokens + b, </s> included


def test_repetition_penalty_in_search_avoids_the_repeat() -> None:
    # After A the table prefers A again (0.5 > 0.4). The fake logits are log-probs, all negative, so θ = 2
    # multiplies A's logit by 2: probability 0.5 -> 0.25 (before renormalising), below C's 0.4.
    table = {(): {A: 0.9, B: 0.1}, (A,): {A: 0.5, C: 0.4, EOS: 0.1}}
    plain = greedy_search(TableModel(table), SRC, _config(beam_size=1))[0][0]
    penalised = greedy_search(TableModel(table), SRC, _config(beam_size=1, repetition_penalty=2.0))[0][0]
    assert plain.tokens[:2] == [A, A]
    assert penalised.tokens[:2] == [A, C]


def test_no_repeat_ngram_blocks_in_search() -> None:
    cycle = {(): {A: 0.9, EOS: 0.1}, **{(A, B) * n + (A,): {B: 0.9, EOS: 0.1} for n in range(3)},
             **{(A, B) * n: {A: 0.9, EOS: 0.1} for n in range(1, 4)}}
    plain = greedy_search(TableModel(cycle), SRC, _config(beam_size=1, max_len_b=8))[0][0]
    blocked = greedy_search(TableModel(cycle), SRC, _config(beam_size=1, max_len_b=8, no_repeat_ngram=2))[0][0]
    assert plain.tokens[:4] == [A, B, A, B]
    assert blocked.tokens == [A, B, A]  # "A B" again is blocked; </s> is the best remaining token


def test_the_transformer_and_a_table_are_both_searchable_models() -> None:
    from vaswani.config import ModelConfig
    from vaswani.decoding.search import SearchableModel
    from vaswani.model import Transformer

    assert isinstance(Transformer(ModelConfig.preset("tiny", vocab_size=VOCAB)), SearchableModel)
    assert isinstance(TableModel({}), SearchableModel)
    assert not isinstance(torch.nn.Linear(2, 2), SearchableModel)  # a module is not one by being a module
