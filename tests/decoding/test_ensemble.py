"""Ensembles: the weighted mean of the models' log-probabilities at every step, each model with its own
key/value cache; a model with itself is the model; what cannot form an ensemble is refused in one line."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch

from vaswani.cli import main
from vaswani.config import ModelConfig
from vaswani.decoding import EngineOptions, SearchConfig, Translator, UncachedModel
from vaswani.decoding.ensemble import Ensemble
from vaswani.decoding.search import generate
from vaswani.errors import ConfigError, VaswaniError, VaswaniWarning
from vaswani.model import Transformer
from vaswani.model.serialization import save_model

TORCH = EngineOptions(engine="torch", device="cpu")
SHORT = dict(max_len_a=0.0, max_len_b=10, precision="fp32")


def _models() -> tuple[Transformer, Transformer]:
    torch.manual_seed(1)
    a = Transformer(ModelConfig.preset("tiny", dropout=0.0, vocab_size=60)).eval()
    b = Transformer(ModelConfig.preset("tiny", dropout=0.0, vocab_size=60, n_decoder_layers=1)).eval()
    return a, b


def test_a_step_is_the_weighted_mean_of_the_models_log_probabilities() -> None:
    a, b = _models()
    src, tokens = torch.randint(3, 60, (3, 7)), torch.ones(3, dtype=torch.long)
    ensemble = Ensemble([a, b], weights=[1.0, 3.0])
    with torch.no_grad():
        step = ensemble.decode_step(tokens, ensemble.start_decoding(src))
        expected = 0.25 * torch.log_softmax(a.decode_step(tokens, a.start_decoding(src)), -1) + \
            0.75 * torch.log_softmax(b.decode_step(tokens, b.start_decoding(src)), -1)
    assert torch.allclose(step, expected, atol=1e-6)


@pytest.mark.parametrize("search", [SearchConfig(beam_size=1, **SHORT),
                                    SearchConfig(beam_size=4, nbest=2, **SHORT)])
def test_each_model_keeps_its_own_cache_through_the_beams(search: SearchConfig) -> None:
    """The cached ensemble searches as one of models that recompute every prefix (fp32, CPU, within 1e-4)."""
    a, b = _models()
    src = torch.randint(3, 60, (4, 9))
    src[1, 6:] = 0
    cached = generate(Ensemble([a, b]), src, search)
    uncached = generate(Ensemble([UncachedModel(a), UncachedModel(b)]), src, search)
    assert [[h.tokens for h in n] for n in cached] == [[h.tokens for h in n] for n in uncached]
    expected = [h.score for n in uncached for h in n]
    assert [h.score for n in cached for h in n] == pytest.approx(expected, abs=1e-4)


def test_a_model_with_itself_translates_as_the_model(tiny_checkpoint: Path, test_pairs) -> None:
    search = SearchConfig(beam_size=3, nbest=2, length_norm="power", **SHORT)
    single = Translator.load(tiny_checkpoint, search, TORCH).translate_nbest(test_pairs[0][:6])
    pair = Translator.load_ensemble([tiny_checkpoint, tiny_checkpoint], search, TORCH,
                                    weights=[2.0, 1.0]).translate_nbest(test_pairs[0][:6])
    assert [[h.text for h in n] for n in pair] == [[h.text for h in n] for n in single]
    assert [h.score for n in pair for h in n] == pytest.approx([h.score for n in single for h in n], abs=1e-4)


def test_what_cannot_form_an_ensemble_is_refused_in_one_line(tiny_checkpoint: Path, tmp_path: Path,
                                                             synthetic_tokenizer) -> None:
    with pytest.raises(ConfigError, match="ctranslate2 searches one model"):
        Translator.load_ensemble([tiny_checkpoint] * 2, options=EngineOptions(engine="ctranslate2"))
    with pytest.warns(VaswaniWarning, match="engine auto: torch, because CTranslate2 searches one model"):
        Translator.load_ensemble([tiny_checkpoint] * 2, options=EngineOptions(engine="auto", device="cpu"))
    for weights in ([1.0], [1.0, float("nan")], [1.0, 0.0], [1.0, -2.0]):
        with pytest.raises(ConfigError, match="weight"):
            Translator.load_ensemble([tiny_checkpoint] * 2, options=TORCH, weights=weights)
    other = Path(shutil.copytree(tiny_checkpoint, tmp_path / "other"))
    from vaswani.data.tokenizer import Tokenizer

    Tokenizer.train(["ganz andere Wörter hier"] * 50, vocab_size=300).save(other / "tokenizer.json")
    with pytest.raises(VaswaniError, match=r"other: its tokenizer.json is not .*'s; an ensemble's models"):
        Translator.load_ensemble([tiny_checkpoint, other], options=TORCH)


def test_translate_takes_checkpoint_repeated_with_weights(tiny_checkpoint: Path, tmp_path: Path,
                                                          source_file: Path, capsys) -> None:
    other = tmp_path / "other"
    torch.manual_seed(3)
    other.mkdir()
    shutil.copy(tiny_checkpoint / "tokenizer.json", other / "tokenizer.json")
    save_model(Transformer(ModelConfig.preset("tiny", dropout=0.0, vocab_size=1000)), other,
               other / "tokenizer.json")
    common = ["translate", "--checkpoint", str(tiny_checkpoint), "--checkpoint", str(other), "--input",
              str(source_file), "--engine", "torch", "--device", "cpu", "--max-len-a", "0",
              "--max-len-b", "6"]
    assert main([*common, "--weights", "1", "2"]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 2
    assert main([*common, "--weights", "1"]) == 2
    assert "--weights gives 1 weights for 2 checkpoints" in capsys.readouterr().err
