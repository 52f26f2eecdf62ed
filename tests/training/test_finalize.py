"""The end of a run: the final weights and search are the ones that score best on validation data, they are what
translate/evaluate load by default, and the test sets are scored once with them."""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from vaswani.cli import build_parser
from vaswani.decoding.commands import translator_from_args
from vaswani.decoding.config import SEARCH_FILE, EngineOptions, SearchConfig, StoredSearch
from vaswani.errors import ConfigError
from vaswani.evaluation.selection import Selection
from vaswani.model.serialization import resolve_checkpoint
from vaswani.training.presets import apply_settings, load_preset
from vaswani.training.summary import RunSummary


def test_the_final_weights_and_search_score_best_on_validation(finished_run) -> None:
    run_dir, summary = finished_run
    final = run_dir / "checkpoints" / "final"
    selection = Selection.read(final)
    candidates = {candidate.weights: candidate for candidate in selection.candidates}
    # best and last (one candidate when they are the same step), then the averages of the last 2 and 3
    assert {"average of last 2", "average of last 3"} <= set(candidates)
    assert candidates["average of last 3"].checkpoints == ["step_0000004", "step_0000008", "step_0000012"]
    chosen_bleu = candidates[selection.weights].greedy_valid.bleu
    assert chosen_bleu == max(candidate.greedy_valid.bleu for candidate in candidates.values())
    assert [row.search for row in selection.searches] == ["greedy", "beam 2, power 0.6", "beam 2, power 1.5"]
    assert selection.valid.bleu == max(row.valid.bleu for row in selection.searches)
    assert selection.valid_sentences == 24

    # the final weights are exactly the chosen candidate's
    weights = load_file(final / "model.safetensors")
    steps = [load_file(run_dir / "checkpoints" / name / "model.safetensors")
             for name in candidates[selection.weights].checkpoints]
    for name, tensor in weights.items():
        expected = torch.stack([step[name].double() for step in steps]).mean(0).to(tensor.dtype)
        torch.testing.assert_close(tensor, expected, rtol=0, atol=1e-7)

    # and the search chosen on validation is stored with them
    chosen = next(row for row in selection.searches if row.search == selection.search)
    assert StoredSearch.read(final).settings == chosen.settings
    assert summary.final.search == selection.search
    # train.final_ensembles is off by default: no ensemble is scored or stored
    assert not any(name.startswith("ensemble") for name in candidates) and selection.single_weights is None
    assert not (final / "ensemble.json").exists()
    assert not list((run_dir / "checkpoints").glob(".tmp-*")) and not list((run_dir / "checkpoints").glob(".repl*"))


def test_int8_is_the_default_quantization_only_within_0_3_bleu_of_float32(finished_run) -> None:
    pytest.importorskip("ctranslate2")
    run_dir, summary = finished_run
    final = run_dir / "checkpoints" / "final"
    quantization = json.loads((final / "selection.json").read_text())["quantization"]
    float32, int8 = quantization["float32"]["bleu"], quantization["int8"]["bleu"]
    assert quantization["chosen"] == ("int8" if int8 >= float32 - 0.3 else "float32")
    stored = StoredSearch.read(final)
    assert (stored.engine, stored.quantization) == (None, quantization["chosen"])
    assert summary.final.quantization == quantization["chosen"]
    # float32 is the torch engine's search on the same sentences: the same BLEU
    chosen = json.loads((final / "selection.json").read_text())
    assert float32 == pytest.approx(chosen["valid"]["bleu"], abs=1e-9)


def test_the_test_sets_are_scored_once_with_the_final_model(finished_run) -> None:
    run_dir, summary = finished_run
    final = run_dir / "checkpoints" / "final"
    results = json.loads((final / "eval" / "multi30k-test2016" / "results.json").read_text())
    assert results["sentences"] == 1000
    stored = StoredSearch.read(final).settings
    assert {key: results["search"][key] for key in stored} == stored
    assert summary.final.test["multi30k-test2016"].bleu == round(results["bleu"], 3)
    assert RunSummary.read(run_dir) == summary


def test_a_run_directory_means_its_final_model_and_its_search(finished_run) -> None:
    run_dir, _ = finished_run
    assert resolve_checkpoint(run_dir) == run_dir / "checkpoints" / "final"
    stored = StoredSearch.read(run_dir / "checkpoints" / "final").settings
    translator = translator_from_args(build_parser().parse_args(["translate", "--checkpoint", str(run_dir)]))
    assert (translator.config.beam_size, translator.config.alpha) == (stored["beam_size"], stored["alpha"])


def test_options_given_on_the_command_line_win_over_the_stored_search(tiny_checkpoint: Path, tmp_path) -> None:
    checkpoint = tmp_path / "checkpoint"
    shutil.copytree(tiny_checkpoint, checkpoint)

    def search(*options: str) -> SearchConfig:
        args = build_parser().parse_args([*options, "--checkpoint", str(checkpoint), "--device", "cpu"])
        return translator_from_args(args).config

    assert search("translate").beam_size == SearchConfig().beam_size  # no search.json: the defaults
    StoredSearch.of(SearchConfig(beam_size=3, alpha=1.2, max_len_b=7)).write(checkpoint)
    stored = search("evaluate")
    assert (stored.beam_size, stored.alpha, stored.max_len_b, stored.max_len_a) == (3, 1.2, 7, 1.5)
    mixed = search("translate", "--beam", "1")
    assert (mixed.beam_size, mixed.alpha) == (1, 1.2)


def test_the_stored_search_is_written_and_read_as_a_record_of_what_was_chosen(tmp_path) -> None:
    from vaswani.decoding.config import EngineOptions

    assert StoredSearch.read(tmp_path) == StoredSearch()  # no search.json: nothing stored, the defaults
    StoredSearch.of(SearchConfig(beam_size=3, length_norm="power", alpha=1), quantization="int8").write(tmp_path)
    assert json.loads((tmp_path / SEARCH_FILE).read_text()) == {  # what is not stored is left out of the file
        "beam_size": 3, "length_norm": "power", "alpha": 1.0, "max_len_a": 1.5, "max_len_b": 10,
        "quantization": "int8"}
    stored = StoredSearch.read(tmp_path)
    assert stored == StoredSearch(3, "power", 1.0, 1.5, 10, engine=None, quantization="int8")
    assert stored.search(beam_size=1) == SearchConfig(beam_size=1, length_norm="power", alpha=1.0)
    assert EngineOptions(engine=None).with_stored(stored) == EngineOptions(engine="auto", quantization="int8")
    (tmp_path / SEARCH_FILE).write_text('{"alpha": 0.8, "engine": "cuda"}')
    with pytest.raises(ConfigError, match="engine 'cuda' is not one of") as error:
        StoredSearch.read(tmp_path)
    assert str(tmp_path / SEARCH_FILE) in str(error.value) and error.value.field == "search.engine"


@pytest.mark.parametrize("content, fragment", [
    ("{not json", "not valid JSON"),
    ('{"beam_size": 0}', "search.beam_size"),
    ('{"temperature": 2}', "expected an object with keys"),
])
def test_a_damaged_search_file_is_refused_naming_it(tiny_checkpoint: Path, tmp_path, content: str,
                                                     fragment: str) -> None:
    checkpoint = tmp_path / "checkpoint"
    shutil.copytree(tiny_checkpoint, checkpoint)
    (checkpoint / SEARCH_FILE).write_text(content)
    with pytest.raises(ConfigError, match=fragment) as error:
        translator_from_args(build_parser().parse_args(["translate", "--checkpoint", str(checkpoint)]))
    assert str(checkpoint / SEARCH_FILE) in str(error.value)


def test_the_cpu_preset_ends_with_a_final_model_scored_on_both_test_sets() -> None:
    config = load_preset("multi30k-cpu")
    assert config.train.final_model and config.train.average_last >= 2
    assert config.train.final_test_splits == ("test2016", "test2017")
    assert config.train.final_alphas == tuple(sorted(config.train.final_alphas))


def test_a_list_setting_reads_any_number_of_values() -> None:
    config = apply_settings(load_preset("smoke"), ["train.final_alphas=0.5,1,2", "train.final_test_splits=val"])
    assert config.train.final_alphas == (0.5, 1.0, 2.0) and config.train.final_test_splits == ("val",)
    with pytest.raises(ConfigError, match="train.final_alphas"):
        apply_settings(load_preset("smoke"), ["train.final_alphas=0.5,-1"])


def test_pruning_keeps_the_checkpoints_around_the_best_as_well_as_the_newest(tmp_path) -> None:
    from vaswani.training.checkpoint import prune

    checkpoints = tmp_path / "checkpoints"
    for step in range(1, 13):
        (checkpoints / f"step_{step:07d}").mkdir(parents=True)
    (checkpoints / "best").symlink_to("step_0000004")
    (checkpoints / "last").symlink_to("step_0000012")
    prune(checkpoints, keep=3, around_best=3)
    kept = sorted(int(p.name[5:]) for p in checkpoints.glob("step_*"))
    assert kept == [3, 4, 5, 10, 11, 12]  # the best and its two neighbours, and the newest three
    prune(checkpoints, keep=3)  # without the region: the best and the newest only
    assert sorted(int(p.name[5:]) for p in checkpoints.glob("step_*")) == [4, 10, 11, 12]


def test_the_final_model_may_be_the_average_around_the_best_when_the_loss_rose_after_it(finished_run,
                                                                                      tmp_path) -> None:
    from vaswani.training.finalize import _candidates

    run_dir, _ = finished_run
    checkpoints = tmp_path / "run" / "checkpoints"
    shutil.copytree(run_dir / "checkpoints", checkpoints, symlinks=True)
    shutil.rmtree(checkpoints / "final", ignore_errors=True)
    for step in (16, 20):  # two later checkpoints, while the best stays early
        shutil.copytree(checkpoints / "step_0000012", checkpoints / f"step_{step:07d}")
    for link, target in (("best", "step_0000004"), ("last", "step_0000020")):
        (checkpoints / link).unlink()
        (checkpoints / link).symlink_to(target)
    (tmp_path / "staging").mkdir()
    found = _candidates(checkpoints, average_last=3, staging=tmp_path / "staging")
    assert found["average of 3 around best"][1] == ["step_0000004", "step_0000008", "step_0000012"]
    assert found["average of last 3"][1] == ["step_0000012", "step_0000016", "step_0000020"]
    # where the best is among the newest, the region is the last k and is not scored twice
    (checkpoints / "best").unlink()
    (checkpoints / "best").symlink_to("step_0000016")
    assert not any("around best" in name for name in _candidates(checkpoints, 3, tmp_path / "staging2"))


def test_finalize_can_choose_an_ensemble_that_translate_then_searches(finished_run, tmp_path, monkeypatch,
                                                                      capsys) -> None:
    """With train.final_ensembles, ensembles of the last checkpoints are candidates scored like the others; one
    that wins (here helped to, as a trained one would by its BLEU) is stored in the final model, whose run
    directory `translate` then searches as the ensemble, on the torch engine."""
    from vaswani.decoding.ensemble import EnsembleEngine
    from vaswani.decoding.translator import Translator
    from vaswani.training import finalize as finalizing

    run_dir, _ = finished_run
    run = Path(shutil.copytree(run_dir, tmp_path / "run", symlinks=True))
    config = apply_settings(load_preset(str(run / "config.yaml")), ["train.final_ensembles=2,3,9"])
    config.train.final_test_splits = ()
    scored = finalizing._score

    def favour_two(translator, sources, references):  # noqa: ANN001, ANN202 - finalize's own signature
        scores = scored(translator, sources, references)
        pair = isinstance(translator.engine, EnsembleEngine) and len(translator.engine.models) == 2
        return dataclasses.replace(scores, bleu=scores.bleu + 50) if pair else scores

    monkeypatch.setattr(finalizing, "_score", favour_two)
    selection = finalizing.finalize(run, config, torch.device("cpu"), "fp32")
    assert "no ensemble of 9 (train.final_ensembles): the run kept 3 step checkpoints" in capsys.readouterr().err
    candidates = {candidate.weights: candidate.checkpoints for candidate in selection.candidates}
    assert candidates["ensemble of last 2"] == ["step_0000008", "step_0000012"]
    assert candidates["ensemble of last 3"] == ["step_0000004", "step_0000008", "step_0000012"]
    assert selection.weights == "ensemble of last 2" and selection.single_weights in candidates
    assert selection.quantization.chosen is None and "ensemble of 2" in selection.quantization.reason

    final = run / "checkpoints" / "final"
    for index, step in enumerate(candidates["ensemble of last 2"]):  # the members are copies of the checkpoints
        member = load_file(final / "ensemble" / str(index) / "model.safetensors")
        for name, tensor in load_file(run / "checkpoints" / step / "model.safetensors").items():
            assert torch.equal(member[name], tensor)
    with pytest.warns(Warning, match="engine auto: torch, because CTranslate2 searches one model and .* is an "
                                     "ensemble of 2"):
        translator = translator_from_args(build_parser().parse_args(
            ["translate", "--checkpoint", str(run), "--device", "cpu", "--precision", "fp32"]))
    assert isinstance(translator.engine, EnsembleEngine) and len(translator.engine.models) == 2
    assert translator.config.beam_size == StoredSearch.read(final).beam_size
    steps = [run / "checkpoints" / step for step in candidates["ensemble of last 2"]]
    sentences = ["Ein Mann fährt Fahrrad.", "Zwei Hunde spielen im Schnee."]
    expected = Translator.load_ensemble(steps, translator.config, EngineOptions(engine="torch", device="cpu"))
    assert translator.translate(sentences) == expected.translate(sentences)
    with pytest.raises(ConfigError, match="ctranslate2 searches one model"):
        translator_from_args(build_parser().parse_args(
            ["translate", "--checkpoint", str(run), "--device", "cpu", "--engine", "ctranslate2"]))
