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


def _stored_ensemble(tiny_checkpoint: Path, directory: Path) -> list[Path]:
    """A checkpoint that is the ensemble of two tiny models (ensemble.json), its own weights the first's."""
    from vaswani.decoding.stored_ensemble import member_name, write_stored_ensemble
    from vaswani.io import write_manifest
    from vaswani.model.serialization import CHECKPOINT_KIND

    shutil.copytree(tiny_checkpoint, directory)
    members = [Path(shutil.copytree(tiny_checkpoint, directory / member_name(0))), directory / member_name(1)]
    members[1].mkdir()
    shutil.copy(tiny_checkpoint / "tokenizer.json", members[1] / "tokenizer.json")
    torch.manual_seed(4)
    save_model(Transformer(ModelConfig.preset("tiny", dropout=0.0, vocab_size=1000)), members[1],
               members[1] / "tokenizer.json")
    write_manifest(members[1], CHECKPOINT_KIND)
    write_stored_ensemble(directory, [1.0, 3.0])
    return members


def test_a_checkpoint_that_is_an_ensemble_is_searched_as_its_members(tiny_checkpoint: Path, tmp_path: Path,
                                                                      test_pairs) -> None:
    stored = tmp_path / "final"
    members = _stored_ensemble(tiny_checkpoint, stored)
    search = SearchConfig(beam_size=3, **SHORT)
    loaded = Translator.load(stored, search, TORCH)
    assert loaded.engine.describe().ensemble == 2 and loaded.engine.decoder.weights == [0.25, 0.75]
    expected = Translator.load_ensemble(members, search, TORCH, weights=[1.0, 3.0]).translate(test_pairs[0][:5])
    assert loaded.translate(test_pairs[0][:5]) == expected
    with pytest.warns(VaswaniWarning, match=rf"engine auto: torch, because CTranslate2 searches one model and "
                                            rf"{stored} is an ensemble of 2 \(ensemble.json\)"):
        Translator.load(stored, search, EngineOptions(engine="auto", device="cpu"))
    with pytest.raises(ConfigError, match=r"ctranslate2 searches one model and .* or give one of its members"):
        Translator.load(stored, search, EngineOptions(engine="ctranslate2", device="cpu"))
    with pytest.raises(VaswaniError, match="is an ensemble itself"):
        Translator.load_ensemble([stored, tiny_checkpoint], search, TORCH)


@pytest.mark.parametrize("content, fragment", [
    ('{"members": ["ensemble/0"], "weights": [1]}', "two or more checkpoint folders"),
    ('{"members": ["ensemble/0", "../elsewhere"], "weights": [1, 1]}', "'../elsewhere' is not a folder inside"),
    ('{"members": ["ensemble/0", "ensemble/7"], "weights": [1, 1]}', "'ensemble/7' is missing"),
    ('{"members": ["ensemble/0", "ensemble/1"], "weights": [1, 0]}', "one positive number per member"),
])
def test_a_damaged_ensemble_file_is_refused_naming_it(tiny_checkpoint: Path, tmp_path: Path, content: str,
                                                      fragment: str) -> None:
    stored = tmp_path / "final"
    _stored_ensemble(tiny_checkpoint, stored)
    (stored / "ensemble.json").write_text(content)
    with pytest.raises(VaswaniError, match=fragment) as error:
        Translator.load(stored, SearchConfig(**SHORT), TORCH)
    assert str(stored / "ensemble.json") in str(error.value) and "\n" not in str(error.value)
