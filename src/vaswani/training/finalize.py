"""The final model of a run: which weights and which search, chosen on the whole validation split, then scored
once on the test sets.

The trainer keeps ``best`` (lowest validation loss) and the last few ``step_*`` checkpoints. Neither is reliably
the best translator: BLEU keeps moving after the loss flattens, and the mean of the last checkpoints
(Vaswani et al. §6.1) often beats each of them. The search matters as much: the GNMT length penalty decides how
short translations come out, and BLEU's brevity penalty punishes short ones. So at the end of a run with
``train.final_model`` this module

1. scores each candidate — ``best``, ``last``, the average of the last k step checkpoints for
   k = 2 … ``average_last``, the average of the ``average_last`` checkpoints around ``best`` where the loss rose
   after it, and the ensemble of the last k step checkpoints for each k in ``final_ensembles`` (searched as one
   model, decoding/ensemble.py) — by greedy BLEU on the whole validation split (or its first
   ``final_valid_sentences``), and keeps the highest;
2. tunes the search on the same split: greedy, and beam ``final_beam`` ranked by log P / |Y|^α with each α in
   ``final_alphas`` (the length penalty both engines compute, so the chosen search runs on CTranslate2 too);
3. writes the winner as ``checkpoints/final/`` (weights, model.json, tokenizer.json; for an ensemble, its members
   as ``final/ensemble/<i>/`` named by ``final/ensemble.json``, which ``Translator.load`` searches, beside the best
   single candidate's weights for what runs one model), the chosen search as its ``search.json`` (``translate``,
   ``evaluate`` and ``serve`` use it by default) and every candidate's scores as its ``selection.json``
   (:class:`vaswani.evaluation.selection.Selection`);
4. chooses the CTranslate2 quantization: the chosen search on the CPU in float32 and in int8, on the same split;
   int8 becomes the default (``search.json``) only when it scores within ``INT8_TOLERANCE_BLEU`` of float32 (none
   for an ensemble, which CTranslate2 cannot search);
5. scores it on each of ``final_test_splits``, writing ``checkpoints/final/eval/<test set>/``;
6. for a fine-tuned run (``train.init_from``) whose parent's run directory still holds its settings, scores
   the final model and the parent with the chosen search on the parent's validation split, so that what
   fine-tuning forgot is visible (``selection.json``'s ``parent_validation``).

Nothing is chosen on a test split. ``vaswani finalize --run-dir RUN`` runs the same step on a finished run.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import sys
import time
from pathlib import Path

import torch

from vaswani.data.languages import parse_direction
from vaswani.decoding.config import EngineOptions, SearchConfig, StoredSearch
from vaswani.decoding.stored_ensemble import member_name, write_stored_ensemble
from vaswani.decoding.translator import Translator
from vaswani.errors import VaswaniError
from vaswani.evaluation.average import average_checkpoints, last_checkpoints
from vaswani.evaluation.evaluate import EVALUATIONS_FOLDER, TestSet, evaluate
from vaswani.evaluation.metrics import CorpusScores, corpus_scores
from vaswani.evaluation.selection import (
    Candidate,
    ParentValidation,
    Quantization,
    SearchTried,
    Selection,
    TestSetScores,
)
from vaswani.io import check_name, install_directory, staging_directory, write_faults_named, write_manifest
from vaswani.model.serialization import CHECKPOINT_KIND
from vaswani.training.checkpoint import STEP_NAME, nearest
from vaswani.training.config import RunConfig
from vaswani.training.corpus_record import recorded_out_dir
from vaswani.training.data import split_texts, valid_split_name
from vaswani.training.device_choices import decoding_batches
from vaswani.training.presets import load_preset

FINAL = "final"
MODEL_FILES = ("model.safetensors", "model.json", "tokenizer.json")
# int8 is the default quantization only this close to float32 in validation BLEU: int8 decodes faster, but a
# deployment should not lose more than the noise of choosing between two checkpoints for it.
INT8_TOLERANCE_BLEU = 0.3


def finalize(run_dir: str | Path, config: RunConfig, device: torch.device, precision: str) -> Selection:
    """Choose the final weights and search of the run in ``run_dir`` on its validation split, write
    ``checkpoints/final/`` and score the test splits; returns what was chosen and every score (also in
    ``checkpoints/final/selection.json``)."""
    started = time.perf_counter()
    checkpoints = Path(run_dir) / "checkpoints"
    dc, training = config.data, config.train
    valid_split = valid_split_name(config)
    texts = split_texts(config, [valid_split, *training.final_test_splits], Path(run_dir))
    valid = texts[valid_split]
    sources, references = valid.source[: training.final_valid_sentences], valid.target[: training.final_valid_sentences]
    staging = staging_directory(checkpoints / FINAL, name=f".tmp-{FINAL}-{os.getpid()}")
    batches = decoding_batches(device)
    on_device = EngineOptions(device=str(device))  # the torch engine
    # train.final_max_minutes: once spent, the candidates and searches not yet scored are left out
    deadline = started + 60 * training.final_max_minutes if training.final_max_minutes else float("inf")
    cut_short = False
    try:
        weights: list[Candidate] = []
        directories: dict[str, list[Path]] = {}  # a candidate's checkpoint, or an ensemble's members
        candidates = {name: ([directory], steps)
                      for name, (directory, steps) in _candidates(checkpoints, training.average_last, staging).items()}
        candidates.update(_ensembles(checkpoints, training.final_ensembles))
        for name, (members, steps) in candidates.items():
            if weights and time.perf_counter() > deadline:
                cut_short = True
                break
            greedy = SearchConfig(beam_size=1, precision=precision)
            scores = _score(_translator(members, greedy, on_device, batches), sources, references)
            weights.append(Candidate(name, steps, scores))
            directories[name] = members
            _say(f"final model: {name:<22} greedy val BLEU {scores.bleu:5.2f}  length ratio {scores.length_ratio:.3f}")
        chosen = max(weights, key=lambda candidate: candidate.greedy_valid.bleu)  # ties: the earlier, simpler one
        # What the final checkpoint's own weights hold, for what runs one model: the chosen one or, for an
        # ensemble, the best single candidate.
        single = max((candidate for candidate in weights if len(directories[candidate.weights]) == 1),
                     key=lambda candidate: candidate.greedy_valid.bleu)
        members = directories[chosen.weights] if chosen is not single else []

        searches = [SearchConfig(beam_size=1, precision=precision)] + [
            SearchConfig(beam_size=training.final_beam, length_norm="power", alpha=alpha, precision=precision)
            for alpha in training.final_alphas]
        tried: list[SearchTried] = []
        chosen_model = _translator(directories[chosen.weights], searches[0], on_device, batches)  # searched often
        for search in searches:
            if tried and time.perf_counter() > deadline:
                cut_short = True
                break
            translator = chosen_model.with_search(search, chosen_model.batch_size, chosen_model.max_tokens)
            scores = _score(translator, sources, references)
            tried.append(SearchTried(_describe(search), StoredSearch.of(search).settings, scores))
            _say(f"final search: {_describe(search):<22} val BLEU {scores.bleu:5.2f}  "
                 f"length ratio {scores.length_ratio:.3f}")
        best_search = max(tried, key=lambda row: row.valid.bleu)
        search = dataclasses.replace(SearchConfig(precision=precision), **best_search.settings)

        assembled = _assemble(directories[single.weights][0], staging, search, members)
        if members:
            quantization = Quantization(None, reason=f"the final model is an ensemble of {len(members)} "
                                        "checkpoints, and CTranslate2 searches one model")
        elif time.perf_counter() > deadline:
            cut_short = True
            quantization = Quantization(None, reason=f"train.final_max_minutes={training.final_max_minutes:g} ran out")
        else:
            quantization = choose_quantization(assembled, search, sources, references)
        if quantization.chosen is not None:
            StoredSearch.of(search, quantization=quantization.chosen).write(assembled)
        final = _swap_in(assembled, checkpoints)
    finally:
        shutil.rmtree(staging, ignore_errors=True)

    translator = Translator.load(final, search, on_device, **batches)
    tests: dict[str, TestSetScores] = {}
    for split in training.final_test_splits:
        corpus = texts[split]
        test_set = TestSet(f"{dc.dataset}-{split}", corpus.source, corpus.target)
        folder = final / EVALUATIONS_FOLDER / check_name(test_set.name, "train.final_test_splits")
        result, _ = evaluate(translator, test_set, folder, checkpoint=str(final))
        tests[test_set.name] = TestSetScores(result.bleu, result.chrf, result.length_ratio, result.signature,
                                             result.chrf_signature, result.sentences)
    forgetting = parent_validation(config, translator, search, on_device, batches)
    selection = Selection(weights=chosen.weights, search=best_search.search, search_settings=best_search.settings,
                          valid_split=valid_split, valid_sentences=len(sources), valid=best_search.valid,
                          quantization=quantization, test=tests, candidates=weights, searches=tried,
                          cut_short_by_time=cut_short, seconds=round(time.perf_counter() - started, 1),
                          languages=parse_direction(dc.direction).to_dict(), parent_validation=forgetting,
                          single_weights=single.weights if members else None)
    selection.write(final)
    if cut_short:
        _say(f"final model: train.final_max_minutes={training.final_max_minutes:g} ran out; chosen among the "
             f"{len(weights)} weights and {len(tried)} searches scored by then")
    _say(f"final model: {chosen.weights}, {best_search.search} (chosen on {valid_split}: BLEU "
         f"{best_search.valid.bleu:.2f}) -> {final}")
    for name, test in tests.items():
        _say(f"{name}: BLEU {test.bleu:.2f}  chrF {test.chrf:.2f}  length ratio {test.length_ratio:.3f}  "
             f"({test.sentences} sentences; {test.signature})")
    return selection


def parent_validation(config: RunConfig, fine_tuned: Translator, search: SearchConfig, options: EngineOptions,
                      batches: dict[str, int]) -> ParentValidation | None:
    """The fine-tuned ``fine_tuned`` and its parent, both with ``search``, on the first
    ``train.final_valid_sentences`` of the parent's validation split; None for a run trained from scratch, or
    where the parent's run directory (its ``config.yaml``, and for files its prepared data) is gone."""
    if config.train.init_from is None:
        return None
    checkpoint = Path(config.train.init_from)
    run_dir = checkpoint.parent.parent  # RUN/checkpoints/NAME
    if not (run_dir / "config.yaml").is_file() or not checkpoint.is_dir():
        _say(f"parent validation: left out, {run_dir} holds no run's settings any more")
        return None
    parent_config = load_preset(str(run_dir / "config.yaml"))
    if parent_config.data.files() is not None and recorded_out_dir(run_dir) is None:
        _say(f"parent validation: left out, the data {run_dir} prepared is gone")
        return None
    parent_config.data.data_dir = parent_config.data.data_dir or config.data.data_dir
    split = valid_split_name(parent_config)
    corpus = split_texts(parent_config, [split], run_dir)[split]
    count = config.train.final_valid_sentences
    sources, references = corpus.source[:count], corpus.target[:count]
    parent = Translator.load(checkpoint, search, options, **batches)
    result = ParentValidation(str(checkpoint), split, len(sources), _score(parent, sources, references),
                              _score(fine_tuned, sources, references))
    _say(f"parent validation ({split}, {len(sources)} sentences): BLEU {result.parent.bleu:.2f} before "
         f"fine-tuning, {result.fine_tuned.bleu:.2f} after")
    return result


def choose_quantization(final: Path, search: SearchConfig, sources: list[str], references: list[str]) -> Quantization:
    """The final model's CTranslate2 quantization: ``search`` on the CPU in float32 and in int8, scored on the
    validation ``sources``; int8 only within INT8_TOLERANCE_BLEU of float32. ``chosen`` is None (with the reason)
    where CTranslate2 cannot run the model."""
    cpu_search = dataclasses.replace(search, precision="auto")  # CTranslate2 computes in its quantization
    scores: dict[str, CorpusScores] = {}
    for quantization in ("float32", "int8"):
        try:
            translator = Translator.load(final, cpu_search, EngineOptions(engine="ctranslate2",
                                                                          quantization=quantization, device="cpu"))
        except VaswaniError as error:
            _say(f"final quantization: none ({error})")
            return Quantization(None, reason=str(error))
        scores[quantization] = _score(translator, sources, references)
        _say(f"final quantization: {quantization:<8} val BLEU {scores[quantization].bleu:5.2f} (ctranslate2, cpu)")
    close = scores["int8"].bleu >= scores["float32"].bleu - INT8_TOLERANCE_BLEU
    return Quantization("int8" if close else "float32", tolerance_bleu=INT8_TOLERANCE_BLEU, device="cpu",
                        engine="ctranslate2", float32=scores["float32"], int8=scores["int8"])


def _candidates(checkpoints: Path, average_last: int, staging: Path) -> dict[str, tuple[Path, list[str]]]:
    """best, last and the averages of the last k step checkpoints, each once (best is often last), with the step
    checkpoints each is made of."""
    found: dict[str, tuple[Path, list[str]]] = {}
    for link in ("best", "last"):
        target = (checkpoints / link).resolve()
        if (checkpoints / link).exists() and all(target != directory for directory, _ in found.values()):
            found[link] = (target, [target.name])
    if not found:
        raise VaswaniError(f"{checkpoints}: no best or last checkpoint; train the run first")
    steps = sorted(p for p in checkpoints.glob("step_*") if p.is_dir() and STEP_NAME.match(p.name))
    for k in range(2, min(average_last, len(steps)) + 1):
        averaged = last_checkpoints(checkpoints.parent, k)
        found[f"average of last {k}"] = (average_checkpoints(averaged, staging / f"average-{k}"),
                                         [p.name for p in averaged])
    # the region around the lowest validation loss, where the loss rose after it (the trainer keeps that region)
    around = nearest(steps, (checkpoints / "best").resolve(), average_last) if "best" in found else []
    if len(around) >= 2 and around != steps[-len(around):]:
        found[f"average of {len(around)} around best"] = (
            average_checkpoints(around, staging / "average-around-best"), [p.name for p in around])
    return found


def _ensembles(checkpoints: Path, sizes: tuple[int, ...]) -> dict[str, tuple[list[Path], list[str]]]:
    """The ensemble of the last k step checkpoints for each k in ``sizes`` that the run has that many of, with
    the checkpoints it is made of."""
    steps = sorted(p for p in checkpoints.glob("step_*") if p.is_dir() and STEP_NAME.match(p.name))
    found = {}
    for k in sorted(set(sizes)):
        if k > len(steps):
            _say(f"final model: no ensemble of {k} (train.final_ensembles): the run kept {len(steps)} step "
                 "checkpoints")
            continue
        members = last_checkpoints(checkpoints.parent, k)
        found[f"ensemble of last {k}"] = (members, [p.name for p in members])
    return found


def _translator(members: list[Path], search: SearchConfig, options: EngineOptions,
                batches: dict[str, int]) -> Translator:
    """A checkpoint's translator, or its members' searched as one (an ensemble)."""
    if len(members) == 1:
        return Translator.load(members[0], search, options, **batches)
    return Translator.load_ensemble(members, search, options, **batches)


def _score(translator: Translator, sources: list[str], references: list[str]) -> CorpusScores:
    return corpus_scores(translator.translate(sources, progress=True), references)


def _describe(search: SearchConfig) -> str:
    return "greedy" if search.beam_size == 1 else f"beam {search.beam_size}, {search.length_norm} {search.alpha:g}"


def _assemble(source: Path, staging: Path, search: SearchConfig, members: list[Path]) -> Path:
    """The final model in ``staging``: ``source``'s model files and ``search``, and with ``members`` (an
    ensemble), a copy of each member's model files as a checkpoint of its own inside it, and ensemble.json."""
    assembled = staging / FINAL
    assembled.mkdir()
    for name in MODEL_FILES:
        shutil.copyfile(source / name, assembled / name)  # fsynced when the whole is installed
    for index, member in enumerate(members):
        copy = assembled / member_name(index)
        copy.mkdir(parents=True)
        for name in MODEL_FILES:
            shutil.copyfile(member / name, copy / name)
        write_manifest(copy, CHECKPOINT_KIND)
    if members:
        write_stored_ensemble(assembled, [1.0] * len(members))
    StoredSearch.of(search).write(assembled)
    return assembled


def _swap_in(assembled: Path, checkpoints: Path) -> Path:
    """Give the assembled final model its manifest and swap it in as ``checkpoints/final`` by renames: a kill at any
    instant leaves either the earlier final model or the new one, never half of one."""
    write_manifest(assembled, CHECKPOINT_KIND)  # a checkpoint by its manifest, its files checked at every load
    final = checkpoints / FINAL
    with write_faults_named(final):
        install_directory(assembled, final, aside=checkpoints / f".replaced-{FINAL}")
    return final


def _say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)
