"""`vaswani experiment ensemble`: what searching several models as one buys and costs, on Multi30k.

Given N runs (``--runs``), or N seeds of a preset trained into ``--runs-dir`` (``--seeds``, resumable, each a plain
run), each run's model (its final model, else its best checkpoint) is scored alone, in ensembles of 2 and in
ensembles of 4 (``--sizes``): the runs in order, cut into groups of that size (4 runs: two pairs and one
four-model ensemble), each group searched as one model by the torch engine (decoding/ensemble.py: the mean of the
models' log-probabilities at every step). Every system translates the validation split and test2016 with the same
beam search; a row reports the mean BLEU of its size's systems and their range.

Speed: the first system of each size translates the last split ``--repeats`` times, the sizes interleaved in each
repeat (single, pair, four, single, …), so that a change in the machine's load falls on every size alike; a row
reports the median sentences per second, and the machine's load average is written beside it.
"""

from __future__ import annotations

import argparse
import statistics
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Sequence

from vaswani.arguments import ranged
from vaswani.data.corpora import load_corpus
from vaswani.decoding import EngineOptions, SearchConfig, Translator
from vaswani.devices import resolve_device
from vaswani.errors import ConfigError
from vaswani.evaluation.metrics import corpus_scores
from vaswani.experiments.regularization import study_settings
from vaswani.experiments.reporting import (
    device_label,
    fixed,
    log,
    markdown_table,
    provenance_line,
    pyplot,
    write_results,
)
from vaswani.experiments.variants import RunVariant, add_runs_arguments, checked_runs_dir, train_variants
from vaswani.model.serialization import resolve_checkpoint
from vaswani.provenance import load_averages
from vaswani.settings import MAX_BATCH, MAX_COUNT
from vaswani.training.presets import load_preset

RECIPE, SMOKE_RECIPE = "multi30k-cpu", "smoke"
SPLITS = ("val", "test2016")  # the split timed is the last
SMOKE_SENTENCES = 8


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--runs", nargs="+", type=Path, default=None, metavar="RUN",
                        help="finished run directories to ensemble, in the order they are grouped; without it, "
                        "--seeds are trained")
    parser.add_argument("--seeds", nargs="+", type=ranged(int, ge=0, le=MAX_COUNT), default=None,
                        help="seeds of --recipe to train into --runs-dir when no --runs are given (default 0 1 2 3)")
    parser.add_argument("--recipe", default=None,
                        help=f"the preset the seeds train (default {RECIPE}; --smoke: {SMOKE_RECIPE})")
    parser.add_argument("--sizes", nargs="+", type=ranged(int, ge=1, le=MAX_COUNT), default=[1, 2, 4],
                        help="models per system: 1 is each model alone (default 1 2 4)")
    parser.add_argument("--beam", type=ranged(int, ge=1, le=256), default=5, metavar="N", help="beam size (default 5)")
    parser.add_argument("--repeats", type=ranged(int, ge=1, le=MAX_COUNT), default=3, metavar="N",
                        help="timed translations of the last split per size, interleaved (default 3)")
    parser.add_argument("--sentences", type=ranged(int, ge=1, le=MAX_BATCH), default=None, metavar="N",
                        help=f"the first N sentences of each split (default: all; --smoke: {SMOKE_SENTENCES})")
    add_runs_arguments(parser, "runs/experiments/ensemble", "train.max_epochs=20")


@dataclass
class System:
    """One model, or one ensemble searched as one model, and its BLEU on each split."""

    size: int
    members: list[str]  # the runs' names
    bleu: dict[str, float]


@dataclass
class SizeRow:
    """The systems of one size: mean BLEU and its range per split, and the first system's speed."""

    size: int
    systems: int
    bleu: dict[str, float]
    bleu_min: dict[str, float]
    bleu_max: dict[str, float]
    sentences_per_second: float  # the median over the repeats
    repeat_seconds: list[float]
    speed_vs_single: float | None = None


@dataclass
class TrainedSeeds:
    """How the study trained its runs, when it was given none."""

    recipe: str
    seeds: list[int]
    study_settings: list[str]
    runs_dir: str


@dataclass
class EnsembleSettings:
    """What the study scored and how (results.json "settings")."""

    runs: list[str]
    checkpoints: list[str]
    trained: TrainedSeeds | None  # None: the runs were given
    sizes: list[int]
    beam: int
    search: SearchConfig
    engine: str
    precision: str
    splits: list[str]
    sentences: dict[str, int]
    repeats: int
    timed_split: str
    load_average: list[float]  # the 1-minute load average at the start and at the end


def groups(runs: Sequence[int], size: int) -> list[list[int]]:
    """The runs (their indices) in order, cut into consecutive groups of ``size`` (a remainder too small for a
    group is left out)."""
    return [list(runs[start : start + size]) for start in range(0, len(runs) - size + 1, size)]


def run(args: argparse.Namespace) -> int:
    device = resolve_device(args.device)
    runs, trained = _runs(args)
    sizes = sorted(set(args.sizes))
    if sizes[-1] > len(runs):
        raise ConfigError(f"--sizes {sizes[-1]}: an ensemble of {sizes[-1]} needs as many runs, and there are "
                          f"{len(runs)}; give more --runs or --seeds")
    checkpoints = [resolve_checkpoint(run_dir) for run_dir in runs]
    dataset, direction = _shared_data(runs)
    count = args.sentences or (SMOKE_SENTENCES if args.smoke else None)
    corpora = {split: load_corpus(dataset, split, direction, data_dir=args.data_dir) for split in SPLITS}
    texts = {split: (corpus.source[:count], corpus.target[:count]) for split, corpus in corpora.items()}

    load_at_start = load_averages()[0]
    systems, timed = [], {}
    for size in sizes:
        for index, group in enumerate(groups(range(len(runs)), size)):
            translator = _translator([checkpoints[i] for i in group], args.beam, device)
            members = [runs[i].name for i in group]
            systems.append(System(size, members, {split: _bleu(translator, *texts[split]) for split in SPLITS}))
            log(f"ensemble: {' + '.join(members)}: " + ", ".join(f"{split} BLEU {bleu:.2f}"
                                                                 for split, bleu in systems[-1].bleu.items()))
            if index == 0:
                timed[size] = translator
    seconds = _interleaved_seconds(timed, texts[SPLITS[-1]][0], args.repeats)
    rows = summarize(systems, seconds, len(texts[SPLITS[-1]][0]))
    search = next(iter(timed.values())).config
    settings = EnsembleSettings([str(run_dir) for run_dir in runs], [str(c) for c in checkpoints], trained, sizes,
                                args.beam, search, "torch", search.precision, list(SPLITS),
                                {split: len(texts[split][0]) for split in SPLITS}, args.repeats, SPLITS[-1],
                                [load_at_start, load_averages()[0]])
    write_results(args.out, "ensemble", args.command_line, device, asdict(settings),
                  {"device": device_label(device), "systems": [asdict(s) for s in systems],
                   "rows": [asdict(r) for r in rows]},
                  table(rows, settings, provenance_line(device, args.command_line)), {"bleu_speed": plot(rows)})
    log(f"ensemble: wrote {args.out}/results.json, table.md, bleu_speed.png")
    return 0


def _runs(args: argparse.Namespace) -> tuple[list[Path], TrainedSeeds | None]:
    """The runs to score, and how the study trained them (None: given)."""
    if args.runs:
        if args.seeds is not None:
            raise ConfigError("--runs and --seeds: give finished runs to score, or seeds to train, not both")
        return list(args.runs), None
    recipe = args.recipe or (SMOKE_RECIPE if args.smoke else RECIPE)
    seeds = args.seeds if args.seeds is not None else [0, 1, 2, 3]
    extra = study_settings(args.smoke, args.settings)
    runs_dir = checked_runs_dir(args.runs_dir or Path("runs") / "experiments" / "ensemble", "ensemble")
    variants = [RunVariant(f"seed{seed}", f"seed {seed}", (f"train.seed={seed}",)) for seed in seeds]
    trained = train_variants(variants, recipe, runs_dir, args.data_dir, extra, args.jobs)
    return [run.run_dir for run in trained], TrainedSeeds(recipe, seeds, extra, str(runs_dir))


def _shared_data(runs: Sequence[Path]) -> tuple[str, str]:
    """The dataset and direction every run trained on (its config.yaml); runs that differ are refused."""
    found = {}
    for run_dir in runs:
        config = run_dir / "config.yaml"
        if not config.is_file():
            raise ConfigError(f"{run_dir}: no config.yaml; give run directories written by `vaswani train`")
        data = load_preset(str(config)).data
        found[run_dir] = (data.dataset, data.direction)
    if len(set(found.values())) > 1:
        raise ConfigError("the runs trained on different data: " + ", ".join(
            f"{run_dir} {dataset} {direction}" for run_dir, (dataset, direction) in found.items()))
    return next(iter(found.values()))


def _translator(checkpoints: list[Path], beam: int, device) -> Translator:  # noqa: ANN001 - a torch device
    search, options = SearchConfig(beam_size=beam), EngineOptions(engine="torch", device=str(device))
    if len(checkpoints) == 1:
        return Translator.load(checkpoints[0], search, options)
    return Translator.load_ensemble(checkpoints, search, options)


def _bleu(translator: Translator, sources: list[str], references: list[str]) -> float:
    return corpus_scores(translator.translate(sources), references).bleu


def _interleaved_seconds(translators: dict[int, Translator], sources: list[str],
                         repeats: int) -> dict[int, list[float]]:
    """Seconds each size's translator takes over ``sources``, ``repeats`` times, the sizes taking turns."""
    seconds: dict[int, list[float]] = {size: [] for size in translators}
    for repeat in range(repeats):
        for size, translator in translators.items():
            started = time.perf_counter()
            translator.translate(sources)
            seconds[size].append(time.perf_counter() - started)
        log(f"ensemble: speed repeat {repeat + 1}/{repeats}: " + ", ".join(
            f"{size} model(s) {len(sources) / times[-1]:.1f} sentences/s" for size, times in seconds.items()))
    return seconds


def summarize(systems: Sequence[System], seconds: dict[int, list[float]], sentences: int) -> list[SizeRow]:
    """One row per size: the mean BLEU of its systems per split, their range, and its median speed (and how it
    compares with one model's, when one model was timed)."""
    rows = []
    for size, times in seconds.items():
        members = [system for system in systems if system.size == size]
        splits = members[0].bleu
        rows.append(SizeRow(size, len(members), {s: statistics.fmean(m.bleu[s] for m in members) for s in splits},
                            {s: min(m.bleu[s] for m in members) for s in splits},
                            {s: max(m.bleu[s] for m in members) for s in splits},
                            sentences / statistics.median(times), list(times)))
    single = next((row.sentences_per_second for row in rows if row.size == 1), None)
    for row in rows:
        row.speed_vs_single = row.sentences_per_second / single if single else None
    return rows


def table(rows: Sequence[SizeRow], settings: EnsembleSettings, provenance: str) -> str:
    splits = settings.splits
    headers = ["models", "systems", *(f"{split} BLEU (range)" for split in splits),
               f"sentences/s ({settings.timed_split}, median of {settings.repeats})", "× one model"]
    body = [[row.size, row.systems,
             *(f"{fixed(row.bleu[s])} ({fixed(row.bleu_min[s])}-{fixed(row.bleu_max[s])})" for s in splits),
             fixed(row.sentences_per_second, 1), fixed(row.speed_vs_single)] for row in rows]
    trained = settings.trained
    source = (f"{len(settings.runs)} seeds ({', '.join(map(str, trained.seeds))}) of `{trained.recipe}` "
              f"trained with `{' '.join(trained.study_settings)}`" if trained else
              f"{len(settings.runs)} given runs ({', '.join(settings.runs)})")
    sentences = ", ".join(f"{split} {n}" for split, n in settings.sentences.items())
    return (f"# Ensembles on Multi30k\n\nModels: {source}; each run's final model, else its best checkpoint. A "
            f"system of k models is a group of k consecutive runs searched as one (the mean of their "
            f"log-probabilities at every step), beam {settings.beam}, engine torch ({settings.precision}); "
            f"sentences: {sentences}. BLEU is the mean over the size's systems, with their range. Speed: the "
            f"first system of each size, the sizes interleaved in each repeat; the machine's 1-minute load "
            f"average was {settings.load_average[0]:.1f} at the start and {settings.load_average[1]:.1f} "
            f"at the end.\n\n{markdown_table(headers, body)}\n\n{provenance}\n")


def plot(rows: Sequence[SizeRow]):
    plt = pyplot()
    figure, axis = plt.subplots(figsize=(6, 4))
    split = list(rows[0].bleu)[-1]  # the split timed
    for row in rows:
        axis.scatter(row.sentences_per_second, row.bleu[split], label=f"{row.size} model(s)")
    axis.set(xlabel="sentences/s (torch, beam)", ylabel=f"BLEU, {split}", title="ensembles: BLEU against speed")
    axis.legend()
    return figure


__all__ = ["EnsembleSettings", "SizeRow", "System", "TrainedSeeds", "add_arguments", "groups", "run", "summarize",
           "table"]
