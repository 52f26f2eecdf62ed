"""Search on a random tiny Transformer: the KV cache, batching and the length limit change nothing they should not."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from vaswani.config import ModelConfig
from vaswani.decoding import SearchConfig, UncachedModel, beam_search, generate, greedy_search, max_output_lengths
from vaswani.decoding.compiled import CompiledDecoder
from vaswani.model import Transformer

VOCAB = 40


def _model(device, **overrides) -> Transformer:
    config = ModelConfig.preset("tiny", dropout=0.0, vocab_size=VOCAB, **overrides)
    return Transformer(config).to(device).eval()


def _sources(device, lengths=(7, 3, 5, 1)) -> torch.Tensor:
    """(B, S) random sources ending in </s>, right-padded to the longest."""
    src = torch.zeros(len(lengths), max(lengths), dtype=torch.long)
    for row, n in enumerate(lengths):
        src[row, : n - 1] = torch.randint(4, VOCAB, (n - 1,))
        src[row, n - 1] = 2
    return src.to(device)


def _tokens(hypotheses) -> list[list[list[int]]]:
    return [[h.tokens for h in nbest] for nbest in hypotheses]


def _config(**overrides) -> SearchConfig:
    # A random model rarely picks </s>: a small limit keeps outputs short and the tests fast. fp32 on every device:
    # the scores are compared to 1e-4 with teacher-forced fp32 log-probabilities and across search variants, which
    # "auto" precision (bf16 on a GPU) would round to about 1e-2.
    return SearchConfig(**{**dict(max_len_a=1.0, max_len_b=4, precision="fp32"), **overrides})


VARIANTS = [
    dict(),  # sinusoidal, post-LN, sdpa
    dict(positions="rope", norm="pre"),
    dict(positions="learned", attention="standard", sliding_window=3),
    dict(positions="rope", sliding_window=2),  # the ring-buffer cache wraps many times
    dict(positions="none", norm="pre", attention="standard"),
]


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("beam", [1, 3])
def test_cached_search_equals_uncached_search_token_for_token(variant: dict, beam: int, device) -> None:
    model = _model(device, **variant)
    src = _sources(device)
    config = _config(beam_size=beam, nbest=beam)
    cached = generate(model, src, config)
    uncached = generate(UncachedModel(model), src, config)
    assert _tokens(cached) == _tokens(uncached)
    for a, b in zip(cached, uncached):
        assert [h.score for h in a] == pytest.approx([h.score for h in b], abs=1e-4)


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("beam", [1, 3])
def test_preallocated_cache_equals_a_cache_grown_step_by_step(variant: dict, beam: int, device) -> None:
    """Preallocated, in-place caches give the tokens and scores of caches grown by a copy per step (the default)."""
    model = _model(device, **variant)
    src = _sources(device)
    config = _config(beam_size=beam, nbest=beam, max_len_b=9)
    preallocated = generate(model, src, replace(config, preallocate_cache=True))
    grown = generate(model, src, config)
    assert _tokens(preallocated) == _tokens(grown)
    for a, b in zip(preallocated, grown):
        assert [h.score for h in a] == pytest.approx([h.score for h in b], abs=1e-5)


class GraphRecorder:
    """A torch.compile backend that keeps every graph it is handed and runs it as traced (no code generation):
    what is checked is that the traced step computes what the eager one does, and in how many graphs."""

    def __init__(self) -> None:
        self.graphs: list[torch.fx.GraphModule] = []

    def __call__(self, graph: torch.fx.GraphModule, example_inputs: list) -> object:
        self.graphs.append(graph)
        return graph.forward


# Every variant with the default grown caches, and preallocated caches with and without a ring buffer.
COMPILED_CASES = [(variant, False) for variant in VARIANTS] + [(VARIANTS[0], True), (VARIANTS[3], True)]


@pytest.mark.parametrize(("variant", "preallocate"), COMPILED_CASES)
def test_compiled_step_searches_like_the_eager_model_in_one_graph(variant: dict, preallocate: bool, device) -> None:
    torch.compiler.reset()  # graphs traced for other tests' models must not serve (or crowd out) this one's
    model = _model(device, **variant)
    src = _sources(device, lengths=(7, 3, 5, 1, 6))
    recorder = GraphRecorder()
    compiled = CompiledDecoder(model, backend=recorder)
    calls = []
    traced_step = compiled.compiled_step
    compiled.compiled_step = lambda *args: calls.append(1) or traced_step(*args)
    for beam in (1, 3):  # greedy, then a beam that triples the rows: the same compiled step serves both
        calls.clear()
        config = _config(beam_size=beam, nbest=beam, max_len_b=9, preallocate_cache=preallocate)
        eager, traced = generate(model, src, config), generate(compiled, src, config)
        assert _tokens(traced) == _tokens(eager), beam
        for a, b in zip(traced, eager):
            assert [h.score for h in a] == pytest.approx([h.score for h in b], abs=1e-5)
        assert len(calls) >= 5  # most steps went through the compiled step, not the eager fallback
    # Batch sizes, lengths and positions share a graph: no graph breaks, no recompilation per step or per beam size.
    # One more graph when the first compiled batch has as many rows as the model has heads (torch.compile then gives
    # both one symbol and specialises it), and one when a ring buffer (sliding window) fills up.
    assert 1 <= len(recorder.graphs) <= (2 if variant.get("sliding_window") is None else 3)


def test_uncached_reference_with_a_kept_encoder_agrees(device) -> None:
    model, src = _model(device), _sources(device)
    config = _config(beam_size=2)
    assert _tokens(generate(UncachedModel(model, reencode=False), src, config)) == _tokens(generate(model, src, config))


def test_beam_of_one_equals_greedy(device) -> None:
    model, src = _model(device), _sources(device)
    for norm in ("gnmt", "average", "none"):
        config = _config(beam_size=1, length_norm=norm)
        with torch.inference_mode():
            greedy = greedy_search(model, src, config)
            beam = beam_search(model, src, config)
        assert _tokens(greedy) == _tokens(beam)
        assert [g[0].score for g in greedy] == pytest.approx([b[0].score for b in beam], abs=1e-5)


@pytest.mark.parametrize("beam", [1, 4])
def test_batched_search_equals_one_sentence_at_a_time(beam: int, device) -> None:
    model = _model(device)
    lengths = (9, 2, 6, 4, 9)
    src = _sources(device, lengths)
    config = _config(beam_size=beam, nbest=beam)
    batched = generate(model, src, config)
    alone = [generate(model, src[i : i + 1, :n], config)[0] for i, n in enumerate(lengths)]  # no padding at all
    assert _tokens(batched) == _tokens(alone)
    for a, b in zip(batched, alone):
        assert [h.score for h in a] == pytest.approx([h.score for h in b], abs=1e-4)


def test_nbest_is_sorted_distinct_and_scores_are_consistent(device) -> None:
    model, src = _model(device), _sources(device)
    config = _config(beam_size=5, nbest=5, alpha=0.6)
    for nbest in generate(model, src, config):
        assert len(nbest) == 5
        scores = [h.score for h in nbest]
        assert scores == sorted(scores, reverse=True)
        assert len({tuple(h.tokens) for h in nbest}) == 5
        for h in nbest:  # score = log P / GNMT lp(|Y| + </s>)
            assert h.score == pytest.approx(h.log_prob / ((5 + len(h.tokens) + 1) / 6) ** 0.6, rel=1e-5)


def test_scores_are_the_model_log_probabilities(device) -> None:
    """A hypothesis' log_prob is the teacher-forced log-likelihood of its tokens (finished scores are frozen)."""
    model, src = _model(device), _sources(device)
    for i in range(2):
        row = src[i : i + 1]
        for h in generate(model, row, _config(beam_size=3, nbest=3))[0]:
            tgt = torch.tensor([[1, *h.tokens, 2]], device=device)  # <s> y </s>
            with torch.no_grad():
                log_probs = model(row, tgt[:, :-1]).log_softmax(-1)  # (1, T, V)
            expected = log_probs[0].gather(1, tgt[0, 1:, None]).sum().item()
            assert h.log_prob == pytest.approx(expected, abs=1e-4)


def test_length_limit_and_the_learned_position_cap(device) -> None:
    src = _sources(device, (7, 3))
    config = SearchConfig(beam_size=2, max_len_a=2.0, max_len_b=3, allow_eos=False)
    model = _model(device)
    assert max_output_lengths(src, model, config).tolist() == [17, 9]
    lengths = [len(nbest[0].tokens) + 1 for nbest in generate(model, src, config)]
    assert lengths == [17, 9]  # </s> disabled: every hypothesis runs exactly to its limit
    learned = _model(device, positions="learned", max_len=8)
    assert max_output_lengths(src, learned, config).tolist() == [8, 8]
    assert [len(n[0].tokens) + 1 for n in generate(learned, src, config)] == [8, 8]  # and no index error


@pytest.mark.parametrize("beam", [1, 3])
def test_no_repeat_ngram_holds_in_full_search(beam: int, device) -> None:
    model, src = _model(device), _sources(device)
    for n in (1, 2, 3):
        config = _config(beam_size=beam, nbest=beam, no_repeat_ngram=n, max_len_b=12, allow_eos=False)
        for nbest in generate(model, src, config):
            for h in nbest:
                grams = [tuple(h.tokens[i : i + n]) for i in range(len(h.tokens) - n + 1)]
                assert len(grams) == len(set(grams)), (n, h.tokens)


def test_repetition_penalty_reduces_repeats(device) -> None:
    model, src = _model(device), _sources(device)

    def repeats(theta: float) -> int:
        config = _config(beam_size=1, repetition_penalty=theta, max_len_b=16, allow_eos=False)
        return sum(len(h[0].tokens) - len(set(h[0].tokens)) for h in generate(model, src, config))

    assert repeats(50.0) < repeats(1.0)


def test_bf16_autocast_and_eval_mode_are_handled(device) -> None:
    model, src = _model(device), _sources(device)
    fp32 = generate(model, src, _config(beam_size=2))
    bf16 = generate(model, src, _config(beam_size=2, precision="bf16"))
    assert all(0 < len(n[0].tokens) + 1 <= 11 and all(0 <= t < VOCAB for t in n[0].tokens) for n in bf16)
    model.train()  # dropout is 0 here, so any difference would come from the search itself
    assert _tokens(generate(model, src, _config(beam_size=2))) == _tokens(fp32)
    assert model.training  # the caller's mode is restored (validation during training)
