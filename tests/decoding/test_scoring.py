"""Scoring given translations: both engines give a pair the same log-probability, the search's own output
scores what the search gave it, and `vaswani score` writes one line per pair and filters by a threshold."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from vaswani.cli import main
from vaswani.decoding import EngineOptions, SearchConfig, Translator
from vaswani.decoding.scoring import UnscorableText

pytest.importorskip("ctranslate2")

FP32 = SearchConfig(beam_size=1, precision="fp32")  # the torch engine in float32, as CTranslate2's model


@pytest.fixture(scope="module")
def torch_translator(tiny_checkpoint: Path) -> Translator:
    return Translator.load(tiny_checkpoint, FP32, EngineOptions(engine="torch", device="cpu"))


def test_both_engines_score_every_pair_alike_in_float32(checkpoint: Path, torch_translator: Translator,
                                                        test_pairs) -> None:
    """Float32 on the CPU: log-probs agree within 1e-4 (the teacher-forced pass and CTranslate2's kernels sum
    in other orders)."""
    sources, targets = test_pairs
    ct2 = Translator.load(checkpoint, SearchConfig(beam_size=1),
                          EngineOptions(engine="ctranslate2", device="cpu"))
    on_torch, on_ct2 = torch_translator.score(sources, targets), ct2.score(sources, targets)
    for a, b in zip(on_torch, on_ct2):
        assert a.tokens == b.tokens > 1
        assert a.log_prob == pytest.approx(b.log_prob, abs=1e-4)
        assert a.score == pytest.approx(b.score, abs=1e-4)
        assert a.per_token == pytest.approx(b.per_token, abs=1e-5)


@pytest.mark.parametrize("search", [
    SearchConfig(beam_size=1, precision="fp32"),
    SearchConfig(beam_size=3, nbest=3, length_norm="average", precision="fp32"),
])
def test_the_search_output_scores_what_the_search_gave_it(torch_translator: Translator, test_pairs,
                                                          search: SearchConfig) -> None:
    """Teacher forcing and the cached step-by-step search compute the same log-probs (fp32, CPU, within
    1e-4)."""
    engine, config = torch_translator.engine, torch_translator.with_search(search, 64, None).config
    sources = torch_translator.encode(test_pairs[0][:6])
    hypotheses = [h for nbest in engine.search(sources, config) for h in nbest]
    repeated = [source for source in sources for _ in range(search.nbest)]
    scored = engine.score(repeated, [h.tokens for h in hypotheses], config)
    for hypothesis, log_probs in zip(hypotheses, scored):
        assert len(log_probs) == len(hypothesis.tokens) + 1
        assert sum(log_probs) == pytest.approx(hypothesis.log_prob, abs=1e-4)


def test_the_score_is_normalised_as_the_search_normalises(torch_translator: Translator, test_pairs) -> None:
    sources, targets = test_pairs[0][:3], test_pairs[1][:3]
    divisors = {"none": lambda n: 1.0, "average": lambda n: n, "gnmt": lambda n: ((5 + n) / 6) ** 0.6}
    for norm, divisor in divisors.items():
        scorer = torch_translator.with_search(SearchConfig(beam_size=1, length_norm=norm, alpha=0.6,
                                                           precision="fp32"), 64, None)
        for pair in scorer.score(sources, targets):
            assert pair.score == pytest.approx(pair.log_prob / divisor(pair.tokens))
            assert pair.per_token == pytest.approx(pair.log_prob / pair.tokens) and pair.log_prob < 0


def test_a_blank_or_too_long_side_is_refused_naming_its_line(torch_translator: Translator) -> None:
    with pytest.raises(UnscorableText, match=r"^tgt:2: blank line") as blank:
        torch_translator.score(["Ein Hund.", "Zwei Hunde."], ["A dog.", "  "], names=("src", "tgt"))
    assert (blank.value.side, blank.value.index) == (1, 1)
    too_long = " ".join(["Hund"] * (torch_translator.longest_source() + 5))
    with pytest.raises(UnscorableText, match=r"^source:1: longer than the model's"):
        torch_translator.score([too_long], ["A dog."])


def _score(*arguments: str) -> int:
    try:
        return main(["score", "--engine", "torch", "--device", "cpu", "--precision", "fp32", *arguments])
    except SystemExit as exit:  # argparse's own range errors
        return int(exit.code)


@pytest.fixture
def pair_files(tmp_path: Path, test_pairs) -> tuple[Path, Path]:
    src, tgt = tmp_path / "pairs.de", tmp_path / "pairs.en"
    src.write_text("".join(line + "\n" for line in test_pairs[0][:8]), encoding="utf-8")
    tgt.write_text("".join(line + "\n" for line in test_pairs[1][:8]), encoding="utf-8")
    return src, tgt


def test_score_writes_one_line_per_pair_and_keeps_the_pairs_at_or_above_the_threshold(
        tiny_checkpoint: Path, torch_translator: Translator, pair_files, tmp_path: Path, test_pairs) -> None:
    src, tgt = pair_files
    expected = torch_translator.score(test_pairs[0][:8], test_pairs[1][:8])
    threshold = sorted(pair.score for pair in expected)[4]  # the 4 best pairs (and ties) are kept
    out, kept_src, kept_tgt = tmp_path / "scores.tsv", tmp_path / "kept.de", tmp_path / "kept.en"
    assert _score("--checkpoint", str(tiny_checkpoint), "--src", str(src), "--tgt", str(tgt),
                  "--output", str(out), "--min-score", repr(threshold),
                  "--kept-src", str(kept_src), "--kept-tgt", str(kept_tgt)) == 0
    rows = [line.split("\t") for line in out.read_text().splitlines()]
    assert len(rows) == 8 and all(len(row) == 4 for row in rows)
    assert [float(row[0]) for row in rows] == pytest.approx([pair.score for pair in expected], abs=1e-5)
    assert [int(row[3]) for row in rows] == [pair.tokens for pair in expected]
    keep = [i for i, pair in enumerate(expected) if pair.score >= threshold]
    assert len(keep) == 4
    assert kept_src.read_text().splitlines() == [test_pairs[0][i] for i in keep]
    assert kept_tgt.read_text().splitlines() == [test_pairs[1][i] for i in keep]

    jsonl = tmp_path / "scores.jsonl"
    assert _score("--checkpoint", str(tiny_checkpoint), "--src", str(src), "--tgt", str(tgt), "--output",
                  str(jsonl), "--format", "jsonl") == 0
    records = [json.loads(line) for line in jsonl.read_text().splitlines()]
    expected_log_probs = [pair.log_prob for pair in expected]
    assert [record["log_prob"] for record in records] == pytest.approx(expected_log_probs, abs=1e-5)
    assert set(records[0]) == {"score", "log_prob", "per_token", "tokens"}


@pytest.mark.parametrize("extra, message", [
    (["--min-score", "-5"], "give --kept-src FILE and --kept-tgt FILE"),
    (["--kept-src", "k.de", "--kept-tgt", "k.en"], "give --min-score X"),
    (["--min-score", "nan", "--kept-src", "k.de", "--kept-tgt", "k.en"],
     "argument --min-score: needs a number"),
    (["--output", "SRC"], "--output"),
    (["--length-norm", "gnmt", "--alpha", "9"], "argument --alpha: needs a number >= 0 and <= 5"),
])
def test_bad_score_options_are_one_line_errors(tiny_checkpoint: Path, pair_files, tmp_path: Path, capsys,
                                               extra: list[str], message: str) -> None:
    src, tgt = pair_files
    extra = [str(src) if value == "SRC" else str(tmp_path / value) if value.startswith("k.") else value
             for value in extra]
    assert _score("--checkpoint", str(tiny_checkpoint), "--src", str(src), "--tgt", str(tgt), *extra) == 2
    err = capsys.readouterr().err.strip()
    last = err.splitlines()[-1]  # argparse's own errors come after its usage
    assert message in last and last.startswith("vaswani score: error:") and "Traceback" not in err


def test_files_of_different_lengths_or_with_a_blank_line_are_refused_naming_them(
        tiny_checkpoint: Path, pair_files, tmp_path: Path, capsys) -> None:
    src, tgt = pair_files
    short = tmp_path / "short.en"
    short.write_text("A dog.\n", encoding="utf-8")
    assert _score("--checkpoint", str(tiny_checkpoint), "--src", str(src), "--tgt", str(short)) == 2
    assert "has 8 lines and" in capsys.readouterr().err
    blank = tmp_path / "blank.en"
    blank.write_text("".join("A dog.\n" if i != 5 else "\n" for i in range(8)), encoding="utf-8")
    assert _score("--checkpoint", str(tiny_checkpoint), "--src", str(src), "--tgt", str(blank)) == 2
    assert f"{blank}:6: blank line" in capsys.readouterr().err
