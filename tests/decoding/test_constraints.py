"""Lexically constrained beam search: every output holds every constraint, even one the model would not produce;
a sentence without constraints is translated as by the plain search; the constraint state and the banks follow
Post & Vilar (2018); glossaries match whole words; bad constraints files and glossaries are refused in one line,
and so is the ctranslate2 engine."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

from vaswani.cli import main
from vaswani.data.tokenizer import Tokenizer
from vaswani.decoding import EngineOptions, SearchConfig, Translator, UnusableConstraint
from vaswani.decoding.constraints import Candidate, ConstraintState, allocate, constrained_beam_search
from vaswani.decoding.terminology import glossary_constraints, parse_constraints, parse_glossary

SHORT = dict(max_len_a=0.0, max_len_b=16, precision="fp32")  # fp32 on the CPU: exact token comparisons


@pytest.fixture(scope="module")
def on_torch(tiny_checkpoint: Path) -> Translator:
    return Translator.load(tiny_checkpoint, SearchConfig(beam_size=3, **SHORT),
                           EngineOptions(engine="torch", device="cpu"))


def test_the_state_follows_phrases_and_forgets_one_left_half_way() -> None:
    state = ConstraintState.start([[5, 6], [9]])
    assert state.next_tokens() == {5, 9} and state.bank == 0 and not state.complete
    state = state.advance(5)
    assert state.next_tokens() == {6} and state.bank == 1
    left = state.advance(9)  # phrase [5, 6] left half-way; 9 is a phrase of its own
    assert left.met == (False, True) and left.bank == 1 and left.next_tokens() == {5}
    state = state.advance(6).advance(7).advance(9)
    assert state.complete and state.bank == 3 and state.next_tokens() == set()


def test_a_phrase_counts_only_where_a_word_ends() -> None:
    continuations = frozenset({7})  # token 7 continues a word ("s"); 8 starts one ("Ġruns")
    produced = ConstraintState.start([[5], [9]], continuations).advance(5)
    assert produced.met == (False, False) and produced.bank == 1 and produced.next_tokens() == {9}
    assert produced.advance(8).met == (True, False)
    inside = produced.advance(7)  # "dog" + "s": the phrase ended inside a longer word
    assert inside.met == (False, False) and inside.bank == 0 and inside.next_tokens() == {5, 9}
    assert produced.advance(9).met == (True, False) and produced.advance(9).bank == 2  # a phrase starts a word
    last = ConstraintState.start([[5]], continuations).advance(5)
    assert last.complete and last.bank == 1  # </s> ends the word: the hypothesis may end here
    assert ConstraintState.start([[5]]).advance(5).met == (True,)  # no tokenizer: met by its last token


def test_word_continuations_are_the_tokens_inside_words(synthetic_tokenizer: Tokenizer) -> None:
    tokenizer = synthetic_tokenizer
    continuations = tokenizer.word_continuations
    run, suffix = tokenizer.encode(" runs")
    stop, new_word = tokenizer.encode(". dog")
    assert tokenizer.decode([run]) == " run" and tokenizer.decode([suffix]) == "s"
    assert suffix in continuations and run not in continuations and new_word not in continuations
    assert stop not in continuations and tokenizer.eos_id not in continuations
    assert tokenizer.encode("'s")[0] not in continuations  # "dog's" holds the word "dog"
    assert tokenizer.encode("ü")[0] in continuations  # a letter outside ASCII


PAD, BOS, EOS, WORD, DOG, S, RUNS = 0, 1, 2, 4, 5, 6, 7  # S continues a word ("dog" + "s"), RUNS starts one
VOCAB = 8


@dataclass
class PrefixState:
    generated: torch.Tensor  # (N, t) tokens fed so far, <s> first

    def reorder(self, index: torch.Tensor) -> "PrefixState":
        return PrefixState(self.generated.index_select(0, index))

    def reorder_beams(self, rows: torch.Tensor, sentences: torch.Tensor | None) -> "PrefixState":
        return self.reorder(rows)


class TableModel:
    """Next-token probabilities from a table of the tokens generated so far (unlisted: </s>), whatever the
    source: a model that would rather write "dogs" than the word "dog"."""

    table = {(): {WORD: 0.9, DOG: 0.1}, (WORD,): {DOG: 0.5, EOS: 0.5},
             (WORD, DOG): {S: 0.9, EOS: 0.06, RUNS: 0.04}, (DOG,): {S: 0.9, EOS: 0.06, RUNS: 0.04}}

    def start_decoding(self, src: torch.Tensor, capacity: int | None = None) -> PrefixState:
        return PrefixState(src.new_empty(src.size(0), 0))

    def decode_step(self, tokens: torch.Tensor, state: PrefixState) -> torch.Tensor:
        state.generated = torch.cat((state.generated, tokens[:, None]), dim=1)
        probs = torch.full((tokens.size(0), VOCAB), 1e-6)
        for row, generated in enumerate(state.generated.tolist()):
            for token, p in self.table.get(tuple(generated[1:]), {EOS: 1.0}).items():
                probs[row, token] = p
        return probs.log()


@pytest.mark.parametrize("beam", [1, 3])
def test_a_phrase_is_placed_as_a_whole_word(beam: int) -> None:
    config = SearchConfig(beam_size=beam, nbest=beam, length_norm="none", max_len_a=0.0, max_len_b=5,
                          precision="fp32")
    src = torch.tensor([[9, 9, EOS]])
    inside = constrained_beam_search(TableModel(), src, config, [[[DOG]]])[0]  # no tokenizer: token by token
    assert inside[0].tokens == [DOG, S]  # "dogs": the phrase's tokens inside a longer word
    whole = constrained_beam_search(TableModel(), src, config, [[[DOG]]], continuations=frozenset({S}))[0]
    for hypothesis in whole:  # "dog", then a new word or the end
        tokens = hypothesis.tokens
        assert any(token == DOG and tokens[i + 1 : i + 2] != [S] for i, token in enumerate(tokens)), tokens
    assert whole[0].tokens == ([DOG] if beam == 1 else [WORD, DOG])


def test_banks_are_dealt_round_robin_most_met_first() -> None:
    def candidate(score: float, met: int) -> Candidate:
        state = ConstraintState.start([[1, 2, 3]])
        for token in [1, 2, 3][:met]:
            state = state.advance(token)
        return Candidate(score, 0, 10 + int(-score), state)

    candidates = [candidate(-1, 0), candidate(-2, 0), candidate(-3, 0), candidate(-9, 2), candidate(-8, 1)]
    assert [c.score for c in allocate(candidates, 3)] == [-9, -8, -1]
    assert [c.score for c in allocate(candidates, 5)] == [-9, -8, -1, -2, -3]


def _contains(tokens: list[int], phrase: list[int]) -> bool:
    return any(tokens[i : i + len(phrase)] == phrase for i in range(len(tokens) - len(phrase) + 1))


@pytest.mark.parametrize("beam", [1, 3])
def test_every_output_holds_every_constraint_the_model_would_not_produce(on_torch: Translator, test_pairs,
                                                                         beam: int) -> None:
    translator = on_torch.with_search(SearchConfig(beam_size=beam, nbest=min(beam, 2), **SHORT), 64, None)
    texts = test_pairs[0][:6]
    plain = translator.translate_nbest(texts)
    # Words of the English references, which the random model does not write; the third sentence has none.
    phrases = [[] if i == 2 else [" ".join(ref.split()[1:3]), ref.split()[-1]]
               for i, ref in enumerate(test_pairs[1][:6])]
    assert not any(phrase in nbest[0].text for nbest, row in zip(plain, phrases) for phrase in row)
    constrained = translator.translate_nbest(texts, constraints=phrases)
    encoded = translator.encode_constraints(phrases, translator.encode(texts))
    hypotheses = translator.engine.search(translator.encode(texts), translator.config, None, encoded)
    for row, ids, nbest, searched in zip(phrases, encoded, constrained, hypotheses):
        for translation, hypothesis in zip(nbest, searched):
            assert all(phrase in translation.text for phrase in row)
            assert translation.text == translation.text.strip()  # a phrase opening it brings no space
            assert all(_contains(hypothesis.tokens, phrase) for phrase in ids)
    assert [t.text for t in constrained[2]] == [t.text for t in plain[2]]  # no constraint: the plain search's


def test_glossary_terms_match_whole_words_only() -> None:
    glossary = parse_glossary(["Mann\tman", "", "Hund\tdog", "Hunde\tdogs"])
    found = glossary_constraints(["Ein Mann und sein Hund.", "Die Mannschaft.", "Zwei Hunde, ein Hund."], glossary)
    assert found == [["man", "dog"], [], ["dog", "dogs"]]


@pytest.mark.parametrize("lines, message", [
    (["Mann man"], r"^g.tsv:1: expected 'source term<TAB>target term'"),
    (["Mann\tman", "Hund\t"], r"^g.tsv:2: expected"),
])
def test_a_glossary_line_without_two_terms_is_refused(lines: list[str], message: str) -> None:
    with pytest.raises(UnusableConstraint, match=message):
        parse_glossary(lines, "g.tsv")


def test_an_empty_or_too_long_constraint_or_a_missing_line_is_refused(on_torch: Translator) -> None:
    with pytest.raises(UnusableConstraint, match=r"^c.txt:2: an empty constraint"):
        parse_constraints(["dog", "a dog\t\tcat"], "c.txt")
    assert parse_constraints(["a dog\tcat", ""]) == [["a dog", "cat"], []]
    sources = on_torch.encode(["Ein Hund.", "Zwei Hunde."])
    with pytest.raises(UnusableConstraint, match=r"^c.txt:2: \d+ tokens of constraints leave no room") as error:
        on_torch.encode_constraints([["dog"], ["dog " * 20]], sources, name="c.txt")
    assert error.value.index == 1
    with pytest.raises(UnusableConstraint, match="c.txt has 1 lines for 2 sources"):
        on_torch.encode_constraints([["dog"]], sources, name="c.txt")


def test_translate_with_a_constraints_file_and_a_glossary(tiny_checkpoint: Path, tmp_path: Path, capsys) -> None:
    source, constraints, glossary = tmp_path / "in.de", tmp_path / "c.txt", tmp_path / "g.tsv"
    source.write_text("Ein Mann fährt Fahrrad.\nZwei Hunde spielen.\n", encoding="utf-8")
    constraints.write_text("bicycle\n\n", encoding="utf-8")
    glossary.write_text("Hunde\tpuppies\n", encoding="utf-8")
    common = ["translate", "--checkpoint", str(tiny_checkpoint), "--input", str(source), "--device", "cpu",
              "--beam", "3", "--max-len-a", "0", "--max-len-b", "12", "--precision", "fp32"]
    assert main([*common, "--constraints", str(constraints), "--glossary", str(glossary)]) == 0
    captured = capsys.readouterr()
    lines = captured.out.splitlines()
    assert len(lines) == 2 and "bicycle" in lines[0] and "puppies" in lines[1]
    assert "engine auto: torch, because CTranslate2 cannot run lexical constraints" in captured.err

    for content, message in [("bicycle\n", f"{constraints} has 1 lines for 2 input lines"),
                             ("bicycle\t\tbike\n\n", f"{constraints}:1: an empty constraint"),
                             ("bicycle " * 20 + "\n\n", f"{constraints}:1: ")]:
        constraints.write_text(content, encoding="utf-8")
        assert main([*common, "--engine", "torch", "--constraints", str(constraints)]) == 2
        err = capsys.readouterr().err.strip()
        assert message in err and len(err.splitlines()) == 1
    glossary.write_text("Hunde puppies\n", encoding="utf-8")
    assert main([*common, "--engine", "torch", "--glossary", str(glossary)]) == 2
    err = capsys.readouterr().err.strip()
    assert f"{glossary}:1: expected" in err and len(err.splitlines()) == 1


def test_ctranslate2_refuses_constraints_in_one_line(tiny_checkpoint: Path, tmp_path: Path, capsys) -> None:
    pytest.importorskip("ctranslate2")
    source, constraints = tmp_path / "in.de", tmp_path / "c.txt"
    source.write_text("Ein Mann fährt Fahrrad.\n", encoding="utf-8")
    constraints.write_text("bicycle\n", encoding="utf-8")
    assert main(["translate", "--checkpoint", str(tiny_checkpoint), "--input", str(source), "--device", "cpu",
                 "--engine", "ctranslate2", "--constraints", str(constraints)]) == 2
    err = capsys.readouterr().err.strip()
    assert "CTranslate2 cannot run lexical constraints" in err and len(err.splitlines()) == 1


def test_an_ensemble_places_constraints_as_its_model_does(tiny_checkpoint: Path, on_torch: Translator,
                                                          test_pairs) -> None:
    """A model with itself averages to the model: the same constrained translations (fp32, CPU)."""
    pair = Translator.load_ensemble([tiny_checkpoint, tiny_checkpoint], on_torch.config,
                                    EngineOptions(engine="torch", device="cpu"))
    texts, phrases = test_pairs[0][:3], [["red car"], [], ["dog", "snow"]]
    expected = [n[0].text for n in on_torch.translate_nbest(texts, constraints=phrases)]
    assert [n[0].text for n in pair.translate_nbest(texts, constraints=phrases)] == expected
