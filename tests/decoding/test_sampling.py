"""Sampling: draws from the top-k tokens and the top-p nucleus only, the same seed draws the same translations
(on CTranslate2 in a fresh process), a draw is scored as any output, and top-k 1 is greedy search."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from vaswani.cli import main
from vaswani.decoding import EngineOptions, SearchConfig, Translator
from vaswani.decoding.sampling import Sampler

pytest.importorskip("ctranslate2")

SHORT = dict(max_len_a=0.0, max_len_b=10)
SRC = Path(__file__).resolve().parents[2] / "src"


def _sample(**settings) -> SearchConfig:
    return SearchConfig(beam_size=1, sample=True, precision="fp32", **SHORT, **settings)


def test_draws_come_from_the_top_k_tokens_and_the_top_p_nucleus_only() -> None:
    log_probs = torch.log_softmax(torch.tensor([[3.0, 2.0, 1.0, 0.0, -1.0]]), dim=-1).repeat(2000, 1)
    probs = log_probs[0].exp()
    top2 = Sampler(_sample(top_k=2), torch.device("cpu")).pick(log_probs)[1]
    assert set(top2.tolist()) == {0, 1}
    # The nucleus of 0.7: tokens 0 and 1 (0.665 before token 1 is below 0.7, 0.91 before token 2 is not).
    assert probs[0] < 0.7 < probs[0] + probs[1]
    nucleus = Sampler(_sample(top_p=0.7), torch.device("cpu")).pick(log_probs)[1]
    assert set(nucleus.tolist()) == {0, 1}
    picked, tokens = Sampler(_sample(), torch.device("cpu")).pick(log_probs)
    assert set(tokens.tolist()) == {0, 1, 2, 3, 4}  # all five, in 2,000 draws
    assert torch.equal(picked, log_probs[0][tokens])  # the model's log-prob of each draw, untempered
    cold = Sampler(_sample(temperature=0.01), torch.device("cpu")).pick(log_probs)[1]
    assert set(cold.tolist()) == {0}


@pytest.fixture(scope="module")
def on_torch(tiny_checkpoint: Path) -> Translator:
    return Translator.load(tiny_checkpoint, _sample(), EngineOptions(engine="torch", device="cpu"))


def test_the_same_seed_draws_the_same_translations_and_another_seed_others(on_torch: Translator,
                                                                            test_pairs) -> None:
    texts = test_pairs[0][:6]
    draw = lambda **settings: [[h.text for h in n] for n in on_torch.with_search(  # noqa: E731
        _sample(nbest=3, top_p=0.9, **settings), 64, None).translate_nbest(texts)]
    first = draw(seed=7)
    assert draw(seed=7) == first and draw(seed=8) != first
    assert all(len(nbest) == 3 for nbest in first)


def test_a_draw_is_scored_as_the_model_scores_it_and_top_k_1_is_greedy(on_torch: Translator,
                                                                        test_pairs) -> None:
    sampler = on_torch.with_search(_sample(nbest=2, temperature=1.5, seed=1), 64, None)
    sources = sampler.encode(test_pairs[0][:4])
    draws = [h for nbest in sampler.engine.search(sources, sampler.config) for h in nbest]
    repeated = [source for source in sources for _ in range(2)]
    scored = sampler.engine.score(repeated, [h.tokens for h in draws], sampler.config)
    assert [sum(s) for s in scored] == pytest.approx([h.log_prob for h in draws], abs=1e-4)
    greedy = on_torch.with_search(SearchConfig(beam_size=1, precision="fp32", **SHORT), 64, None)
    top1 = on_torch.with_search(_sample(top_k=1, seed=5), 64, None)
    assert top1.translate(test_pairs[0][:6]) == greedy.translate(test_pairs[0][:6])


def test_ctranslate2_samples_reproducibly_in_a_fresh_process_and_top_k_1_is_greedy(
        checkpoint: Path, tmp_path: Path, test_pairs, on_torch: Translator) -> None:
    source = tmp_path / "in.de"
    source.write_text("".join(line + "\n" for line in test_pairs[0][:4]), encoding="utf-8")
    command = [sys.executable, "-m", "vaswani", "translate", "--checkpoint", str(checkpoint),
               "--input", str(source), "--engine", "ctranslate2", "--device", "cpu", "--max-len-a", "0",
               "--max-len-b", "10", "--sample", "--top-p", "0.9", "--nbest", "2"]
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    def run(seed: int) -> str:
        return subprocess.run([*command, "--seed", str(seed)], env=env, capture_output=True, text=True,
                              check=True).stdout

    first = run(3)
    assert run(3) == first and run(4) != first and len(first.splitlines()) == 8
    ct2 = Translator.load(checkpoint, SearchConfig(beam_size=1, sample=True, top_k=1, **SHORT),
                          EngineOptions(engine="ctranslate2", device="cpu"))
    greedy = on_torch.with_search(SearchConfig(beam_size=1, precision="fp32", **SHORT), 64, None)
    got, expected = ct2.translate_nbest(test_pairs[0][:6]), greedy.translate_nbest(test_pairs[0][:6])
    assert [n[0].text for n in got] == [n[0].text for n in expected]
    assert [n[0].log_prob for n in got] == pytest.approx([n[0].log_prob for n in expected], abs=1e-4)


@pytest.mark.parametrize("options, message", [
    (["--top-k", "3"], "set --sample too"),
    (["--sample", "--beam", "3"], "runs with --beam 1, not 3"),
    (["--sample", "--top-p", "0"], "argument --top-p: needs a number > 0 and <= 1"),
    (["--sample", "--temperature", "0"], "argument --temperature: needs a number >= 0.01"),
    (["--sample", "--top-k", "-1"], "argument --top-k: needs a whole number >= 0"),
])
def test_bad_sampling_options_are_one_line_errors(tiny_checkpoint: Path, source_file: Path, capsys,
                                                  options: list[str], message: str) -> None:
    command = ["translate", "--checkpoint", str(tiny_checkpoint), "--input", str(source_file), *options]
    try:
        code = main(command)
    except SystemExit as exit:  # argparse's own range errors
        code = exit.code
    assert code == 2
    last = capsys.readouterr().err.strip().splitlines()[-1]  # argparse's usage comes before its error
    assert message in last and last.startswith("vaswani translate: error:")
