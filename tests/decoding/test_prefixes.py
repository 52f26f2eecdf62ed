"""Target prefixes: every output starts with its prefix, on both engines, scored honestly; a sentence without
one is translated as without the option; what an engine cannot force is refused in one line."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest

from vaswani.cli import main
from vaswani.decoding import EngineOptions, SearchConfig, Translator, UnusablePrefix
from vaswani.errors import ConfigError, VaswaniWarning

pytest.importorskip("ctranslate2")

SHORT = dict(max_len_a=0.0, max_len_b=12, precision="fp32")  # fp32 on the CPU, as CTranslate2's model
GREEDY = SearchConfig(beam_size=1, **SHORT)
BEAM = SearchConfig(beam_size=3, nbest=2, length_norm="power", alpha=1.0, **SHORT)


@pytest.fixture(scope="module")
def on_torch(tiny_checkpoint: Path) -> Translator:
    return Translator.load(tiny_checkpoint, GREEDY, EngineOptions(engine="torch", device="cpu"))


def _prefixes(test_pairs, n: int) -> list[str]:
    """The first two words of n English sentences, every third one left out (no prefix)."""
    return ["" if i % 3 == 2 else " ".join(text.split()[:2]) for i, text in enumerate(test_pairs[1][:n])]


@pytest.mark.parametrize("search", [GREEDY, BEAM], ids=["greedy", "beam"])
def test_each_output_starts_with_its_prefix_and_is_scored_honestly(on_torch: Translator, test_pairs,
                                                                   search: SearchConfig) -> None:
    translator = on_torch.with_search(search, 64, None)
    sources = translator.encode(test_pairs[0][:6])
    prefixes = translator.encode_prefixes(_prefixes(test_pairs, 6), sources)
    forced = translator.engine.search(sources, translator.config, prefixes)
    plain = translator.engine.search(sources, translator.config)
    for prefix, nbest, unforced in zip(prefixes, forced, plain):
        for hypothesis in nbest:
            assert hypothesis.tokens[: len(prefix)] == prefix
        if not prefix:  # a sentence without a prefix gets the plain search's output
            assert [h.tokens for h in nbest] == [h.tokens for h in unforced]
    best = [nbest[0] for nbest in forced]
    scored = translator.engine.score(sources, [h.tokens for h in best], translator.config)
    assert [sum(log_probs) for log_probs in scored] == pytest.approx([h.log_prob for h in best], abs=1e-4)


def test_ctranslate2_forces_prefixes_as_the_torch_search_does(checkpoint: Path, on_torch: Translator,
                                                              test_pairs) -> None:
    """Greedy search, float32 on the CPU: the same tokens, log-probs within 1e-4."""
    ct2 = Translator.load(checkpoint, SearchConfig(beam_size=1, max_len_a=0.0, max_len_b=12),
                          EngineOptions(engine="ctranslate2", device="cpu"))
    texts, prefixes = test_pairs[0][:8], _prefixes(test_pairs, 8)
    expected = on_torch.translate_nbest(texts, prefixes=prefixes)
    got = ct2.translate_nbest(texts, prefixes=prefixes)
    assert [n[0].text for n in got] == [n[0].text for n in expected]
    assert [n[0].log_prob for n in got] == pytest.approx([n[0].log_prob for n in expected], abs=1e-4)
    assert all(n[0].text.startswith(p) for n, p in zip(got, prefixes))


def test_a_prefixed_beam_on_ctranslate2_is_refused_and_auto_takes_torch(checkpoint: Path, test_pairs) -> None:
    options = EngineOptions(engine="ctranslate2", device="cpu")
    with pytest.raises(ConfigError, match="target prefix in beam search"):
        Translator.load(checkpoint, SearchConfig(beam_size=3, length_norm="power"), options, prefixed=True)
    ct2 = Translator.load(checkpoint, SearchConfig(beam_size=3, length_norm="power"), options)
    with pytest.raises(ConfigError, match="target prefix in beam search"):
        ct2.translate_nbest(test_pairs[0][:1], prefixes=["A man"])
    with pytest.warns(VaswaniWarning, match="engine auto: torch, because .*target prefix in beam search"):
        auto = Translator.load(checkpoint, SearchConfig(beam_size=3, length_norm="power"),
                               EngineOptions(engine="auto", device="cpu"), prefixed=True)
    assert auto.engine.name == "torch"
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # greedy: ctranslate2 forces prefixes, no fallback
        greedy = Translator.load(checkpoint, SearchConfig(beam_size=1),
                                 EngineOptions(engine="auto", device="cpu"), prefixed=True)
    assert greedy.engine.name == "ctranslate2"


def test_a_prefix_longer_than_its_output_limit_or_a_missing_line_is_refused(on_torch: Translator) -> None:
    sources = on_torch.encode(["Ein Hund.", "Zwei Hunde."])
    with pytest.raises(UnusablePrefix, match=r"^p.txt:2: \d+ tokens leave no room") as error:
        on_torch.encode_prefixes(["A dog", "dog " * 20], sources, name="p.txt")
    assert error.value.index == 1
    with pytest.raises(UnusablePrefix, match="has 1 lines for 2 sources"):
        on_torch.encode_prefixes(["A dog"], sources)


def test_translate_prefix_file(tiny_checkpoint: Path, tmp_path: Path, test_pairs, capsys) -> None:
    source, prefix, out = tmp_path / "in.de", tmp_path / "prefix.en", tmp_path / "out.en"
    source.write_text("".join(line + "\n" for line in test_pairs[0][:4]), encoding="utf-8")
    prefixes = _prefixes(test_pairs, 4)
    prefix.write_text("".join(line + "\n" for line in prefixes), encoding="utf-8")
    common = ["translate", "--checkpoint", str(tiny_checkpoint), "--input", str(source), "--engine", "torch",
              "--device", "cpu", "--beam", "2", "--max-len-a", "0", "--max-len-b", "12"]
    assert main([*common, "--prefix", str(prefix), "--output", str(out)]) == 0
    lines = out.read_text(encoding="utf-8").splitlines()
    assert len(lines) == 4 and all(line.startswith(p) for line, p in zip(lines, prefixes))
    prefix.write_text("A dog\n", encoding="utf-8")
    assert main([*common, "--prefix", str(prefix)]) == 2
    err = capsys.readouterr().err.strip()
    assert f"{prefix} has 1 lines for 4 sources" in err and len(err.splitlines()) == 1
