"""Train a family of model variants under one recipe, or reuse the runs that already exist.

The ablation and robustness experiments compare models that differ in one setting (norm placement, warmup,
activation, positions) and share everything else: the recipe preset, the number of updates and the seed. Each
variant is a plain ``vaswani train`` run in ``<runs_dir>/<variant>/``, so it can be inspected, resumed or
evaluated like any other run. A run is reused when it finished (``summary.json``) with exactly the config
the experiment would give it; a run that was cut off is resumed; anything else is trained.

With ``jobs > 1`` the runs train in parallel worker processes, each on its share of the cores
(:func:`threads_per_run`: on 2 cores, two single-threaded runs finish sooner than two two-threaded runs taking turns).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import multiprocessing
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import torch

from vaswani.arguments import add_settings_argument, ranged
from vaswani.data.commands import add_data_dir_argument
from vaswani.data.pipeline import default_out_dir, prepare_dataset
from vaswani.data.tokenizer import Tokenizer
from vaswani.devices import resolve_device
from vaswani.errors import VaswaniError
from vaswani.io import check_output, read_yaml
from vaswani.model.serialization import load_model, resolve_checkpoint
from vaswani.precision import resolve_precision
from vaswani.provenance import usable_cores
from vaswani.settings import MAX_COUNT, MAX_THREADS
from vaswani.training.config import RunConfig
from vaswani.training.metrics import METRICS_FILE, MetricsRecord, read_metrics
from vaswani.training.parent import find_parent, fine_tune_config
from vaswani.training.presets import apply_settings, load_preset
from vaswani.training.run import train
from vaswani.training.signals import StopSignals
from vaswani.training.summary import SUMMARY_FILE, RunSummary, Stop


@dataclass(frozen=True)
class RunVariant:
    """One training run of a study: the recipe preset with a few settings changed."""

    name: str  # run directory name and table key
    label: str  # what a reader sees in tables and legends
    settings: tuple[str, ...] = ()  # --set overrides of the recipe
    # the preset this variant changes instead of the study's recipe: a study's own YAML file, for what --set
    # cannot say (several training files, their tags)
    preset: str | None = None


POSITION_LABELS = {"sinusoidal": "sinusoidal", "learned": "learned", "rope": "RoPE"}  # model.positions → label


@dataclass(frozen=True)
class TrainedRun:
    variant: RunVariant
    run_dir: Path
    reused: bool
    finished: bool = True  # False: a run read as it stands, still training or cut off (runs_as_they_stand)


@dataclass(frozen=True)
class VariantRun:
    """A trained run as an experiment's results.json records it."""

    run_dir: str
    reused: bool  # a finished run of the same config found in --runs-dir
    settings: list[str]

    @classmethod
    def of(cls, run: TrainedRun) -> VariantRun:
        return cls(str(run.run_dir), run.reused, list(run.variant.settings))


def variant_config(recipe: str, variant: RunVariant, extra: Sequence[str] = ()) -> RunConfig:
    """The resolved config a variant trains with (what its run's config.yaml must hold)."""
    return run_config(recipe, variant, None, extra)


def _training_settings(config: RunConfig) -> str:
    """The settings that change what is trained, as canonical JSON; where the corpus files live, whether a bar
    is drawn and how many threads train it do not, nor model.vocab_size, which the trainer derives from the
    tokenizer data.vocab_size built."""
    settings = config.to_dict()
    settings["model"].pop("vocab_size", None)
    settings["data"].pop("data_dir", None)
    settings["train"].pop("progress", None)
    settings["train"].pop("num_threads", None)  # how fast, not what: a run is resumed with another --jobs
    return json.dumps(settings, sort_keys=True)


def _state(run_dir: Path, expected: RunConfig) -> str:
    """'done', 'partial' (checkpoints to resume from), 'empty', or 'different' (another config lives there)."""
    config_file = run_dir / "config.yaml"
    if not config_file.is_file():
        return "empty"
    # through the config classes, so a setting added since the run was written reads as its default
    saved = RunConfig.from_dict(read_yaml(config_file, "run's settings"))
    if _training_settings(saved) != _training_settings(expected):
        return "different"
    if (run_dir / SUMMARY_FILE).is_file() and not _ended_by_signal(run_dir):
        return "done"
    return "partial" if (run_dir / "checkpoints" / "last").exists() else "empty"


def checked_runs_dir(runs_dir: Path, experiment: str, inputs: Sequence[Path | None] = ()) -> Path:
    """``runs_dir`` once the output rule allows it: checked ahead of any data or run a study writes there."""
    check_output(runs_dir, command=f"experiment {experiment}", writes="files", option="--runs-dir", inputs=inputs)
    return runs_dir


def run_config(recipe: str, variant: RunVariant, data_dir: Path | None, extra: Sequence[str]) -> RunConfig:
    """The RunConfig a variant trains with (its run's config.yaml, plus where the corpora are). A variant that starts
    from another run's weights (``train.init_from``) takes that run's model and vocabulary, as ``vaswani train
    --init-from`` does, whatever width the recipe names (the clock fit may have chosen a wider one); while that run
    does not exist yet (a parent the study trains first), the recipe's model stands in for it."""
    settings = [*extra, *variant.settings]
    config = apply_settings(load_preset(variant.preset or recipe), settings)
    if config.train.init_from is not None and Path(config.train.init_from).exists():
        config = fine_tune_config(config, find_parent(config.train.init_from), settings)
    if data_dir is not None:
        config.data.data_dir = str(data_dir)
    return config


def train_variants(variants: Sequence[RunVariant], recipe: str, runs_dir: Path, data_dir: Path | None = None,
                   extra: Sequence[str] = (), jobs: int = 1) -> list[TrainedRun]:
    """Make sure every variant has a finished run under ``runs_dir``; returns them in the order given."""
    pending: list[tuple[RunVariant, RunConfig, bool]] = []
    runs: list[TrainedRun] = []
    for variant in variants:
        run_dir = runs_dir / variant.name
        state = _state(run_dir, variant_config(recipe, variant, extra))
        if state == "different":
            raise VaswaniError(
                f"{run_dir} holds a run with another config than variant {variant.name!r} of {recipe} "
                f"(compare {run_dir / 'config.yaml'}); move it away or choose another --runs-dir")
        if state == "done":
            print(f"[{variant.name}] reusing the finished run in {run_dir}", file=sys.stderr)
        else:
            pending.append((variant, run_config(recipe, variant, data_dir, extra), state == "partial"))
        runs.append(TrainedRun(variant, run_dir, reused=state == "done"))
    if jobs <= 1:
        for variant, config, resume in pending:
            print(f"[{variant.name}] training in {runs_dir / variant.name}" + (" (resumed)" if resume else ""),
                  file=sys.stderr)
            train(config, runs_dir / variant.name, resume=resume)
            if _ended_by_signal(runs_dir / variant.name):
                raise VaswaniError(_interrupted_message([variant.name], runs_dir))
    else:
        _train_in_parallel(pending, runs_dir, jobs)
    return runs


def runs_as_they_stand(variants: Sequence[RunVariant], recipe: str, runs_dir: Path,
                       extra: Sequence[str] = ()) -> list[TrainedRun]:
    """The variants' runs under ``runs_dir`` that have a checkpoint, finished or not, training none: for interim
    results while a long study is still running. A variant with no run yet is left out."""
    runs = []
    for variant in variants:
        run_dir = runs_dir / variant.name
        state = _state(run_dir, variant_config(recipe, variant, extra))
        if state == "different":
            raise VaswaniError(f"{run_dir} holds a run with another config than variant {variant.name!r} of {recipe}")
        if state != "empty":
            runs.append(TrainedRun(variant, run_dir, reused=True, finished=state == "done"))
    return runs


def threads_per_run(cores: int, jobs: int) -> int:
    """The torch threads each of ``jobs`` runs training at once takes of ``cores``: their share, at least one.
    Each run left at torch's default would take a thread per core, and OpenMP threads that outnumber the cores
    wait on each other at every operation: two such runs on 2 cores train at a fraction of one run's speed."""
    return max(1, cores // jobs)


def _train_in_parallel(pending: list[tuple[RunVariant, RunConfig, bool]], runs_dir: Path, jobs: int) -> None:
    """Worker processes, at most ``jobs`` at a time; each one's output goes to ``<runs_dir>/<variant>.log``.

    A stop signal (Ctrl-C, a scheduler's SIGTERM) reaches every worker, each saves a checkpoint, and no further run
    starts; so does a worker stopped on its own. The same command resumes them all."""
    runs_dir.mkdir(parents=True, exist_ok=True)
    threads = threads_per_run(usable_cores(), jobs)
    # "spawn": a fresh interpreter per run, as `vaswani train` would be (no forked torch thread pools).
    context = multiprocessing.get_context("spawn")
    queue, running, failed, interrupted = list(pending), [], [], []
    stop = StopSignals()
    with stop.caught():
        while queue or running:
            while queue and len(running) < jobs and stop.received is None and not interrupted:
                variant, config, resume = queue.pop(0)
                if config.train.num_threads is None:  # a count the user set stands
                    config = dataclasses.replace(config, train=dataclasses.replace(config.train, num_threads=threads))
                log = runs_dir / f"{variant.name}.log"
                print(f"[{variant.name}] training in {runs_dir / variant.name}  (log: {log})", file=sys.stderr)
                process = context.Process(target=_train_logged, args=(config, runs_dir / variant.name, resume, log))
                process.start()
                running.append((variant, process, False))
            time.sleep(0.2)
            for index, (variant, process, told) in enumerate(running):
                if stop.received is not None and not told and process.is_alive():
                    os.kill(process.pid, stop.received)  # the worker saves a checkpoint and ends
                    running[index] = (variant, process, True)
            for item in [item for item in running if not item[1].is_alive()]:
                variant, process, _ = item
                process.join()
                running.remove(item)
                # a worker stopped before its handlers were installed ends by the signal itself, with no summary
                if _ended_by_signal(runs_dir / variant.name) or (told and process.exitcode != 0):
                    interrupted.append(variant.name)
                elif process.exitcode != 0:
                    failed.append(variant.name)
                print(f"[{variant.name}] " + ("interrupted" if variant.name in interrupted else
                                              f"finished (exit {process.exitcode})"), file=sys.stderr)
            if stop.received is not None or interrupted:
                queue.clear()
    order = [variant.name for variant, _, _ in pending]  # name runs in the study's order, not the order they ended
    if failed:
        raise VaswaniError(f"training failed for {', '.join(sorted(failed, key=order.index))}: see the logs in "
                           f"{runs_dir}")
    if interrupted:
        raise VaswaniError(_interrupted_message(sorted(interrupted, key=order.index), runs_dir))


def _ended_by_signal(run_dir: Path) -> bool:
    """Whether the run in ``run_dir`` last stopped on a signal (it saved a checkpoint to resume from)."""
    return (run_dir / SUMMARY_FILE).is_file() and RunSummary.read(run_dir).stop_reason is Stop.INTERRUPTED


def _interrupted_message(names: Sequence[str], runs_dir: Path) -> str:
    return (f"interrupted: {', '.join(names)} in {runs_dir} saved a checkpoint; run the same command again to "
            "resume them and train the runs still to come")


def _train_logged(config: RunConfig, run_dir: Path, resume: bool, log: Path) -> None:
    """One variant's training in a worker process, its output appended to ``log``."""
    # Its own process group: a Ctrl-C on the terminal reaches the parent alone, which passes it on once (a second
    # stop signal would abandon the checkpoint the first one is saving).
    os.setpgrp()
    with open(log, "ab", buffering=0) as handle:
        os.dup2(handle.fileno(), sys.stdout.fileno())
        os.dup2(handle.fileno(), sys.stderr.fileno())
        try:
            train(config, run_dir, resume=resume)
        except VaswaniError as error:
            print(f"error: {error}", file=sys.stderr)
            sys.exit(2)


# ---- reading a finished run ---------------------------------------------------------------------------------
def load_final_model(run_dir: Path, device: torch.device):
    """The model and tokenizer of the run's last checkpoint: every variant is compared after the same number of
    updates (not at its own best point, which would favour whichever curve is noisier)."""
    directory = resolve_checkpoint(run_dir / "checkpoints" / "last")
    model = load_model(directory, device=device).eval()
    return model, Tokenizer.load(directory / "tokenizer.json")


def metrics(run_dir: Path) -> list[MetricsRecord]:
    path = run_dir / METRICS_FILE
    if not path.is_file():
        raise VaswaniError(f"{path}: missing; was {run_dir} trained by `vaswani train`?")
    return read_metrics(path)


def final_validation(records: list[MetricsRecord]) -> MetricsRecord:
    """The last full-validation record (the trainer evaluates at the end of every run)."""
    valid = [r for r in records if r.kind == "valid"]
    if not valid:
        raise VaswaniError("the run has no validation record: it ended before its first evaluation")
    return valid[-1]


def load_splits(config: RunConfig, splits: Sequence[str], data_dir: Path | None):
    """The recipe's prepared splits (the same tokenizer and length filter the runs trained with): the
    ``PreparedData`` of :func:`vaswani.data.pipeline.prepare_dataset`, from its cache after the first call."""
    dc = config.data
    return prepare_dataset(dc.dataset, splits=tuple(splits), data_dir=data_dir or dc.data_dir,
                           out_dir=default_out_dir(dc.dataset, dc.direction, dc.vocab_size),
                           vocab_size=dc.vocab_size, max_len=dc.max_len, direction=dc.direction,
                           train_split=dc.train_split)


# ---- the variants of the shared recipe ----------------------------------------------------------------------
RECIPE = "multi30k-ablation"
SMOKE_RECIPE = "smoke"
SMOKE_STEPS = 4

# The recipe itself is the paper's layout: post-LN, warmup, ReLU, sinusoidal positions. Every other variant
# changes one thing (or, for pre-LN without warmup, the two things whose interaction is the claim).
VARIANTS: dict[str, RunVariant] = {v.name: v for v in (
    RunVariant("sinusoidal", "post-LN · warmup · ReLU · sinusoidal (paper)"),
    RunVariant("pre-ln", "pre-LN", ("model.norm=pre",)),
    RunVariant("post-ln-no-warmup", "post-LN, no warmup", ("train.warmup_ramp=false",)),
    RunVariant("pre-ln-no-warmup", "pre-LN, no warmup", ("model.norm=pre", "train.warmup_ramp=false")),
    RunVariant("gelu", "GELU", ("model.activation=gelu",)),
    RunVariant("rope", "RoPE", ("model.positions=rope",)),
    RunVariant("learned", "learned positions", ("model.positions=learned",)),
    # The paper layout again from another seed: how far apart two runs land when nothing changes but the
    # seed, the scale against which every other difference must be read.
    RunVariant("sinusoidal-seed1", "paper layout, seed 1 (noise reference)", ("train.seed=1",)),
)}


def add_runs_arguments(parser: argparse.ArgumentParser, default_runs_dir: str, example_setting: str) -> None:
    """What every study that trains runs takes: where its runs live, how many train at once, settings applied to
    every run, and where the corpora are."""
    parser.add_argument("--runs-dir", type=Path, default=None,
                        help="where the runs live; finished runs with the same config are reused, cut-off ones "
                        f"resumed (default {default_runs_dir})")
    parser.add_argument("--jobs", type=ranged(int, ge=1, le=MAX_THREADS), default=1,
                        help="runs trained at the same time, in worker processes that share the cores (2 jobs on 2 "
                        "cores: one torch thread each) (default %(default)s)")
    add_settings_argument(parser, ("model", "data", "train"), f"{example_setting} (applied to every run)")
    add_data_dir_argument(parser)


def add_variant_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--recipe", default=None,
                        help=f"run preset every variant modifies (default {RECIPE}; --smoke: {SMOKE_RECIPE})")
    parser.add_argument("--steps", type=ranged(int, ge=1, le=MAX_COUNT), default=None,
                        help=f"updates per variant (default: the recipe's train.max_steps; --smoke: {SMOKE_STEPS})")
    add_runs_arguments(parser, "runs/experiments/RECIPE", "train.seed=1")


def train_from_args(args: argparse.Namespace, variants: Sequence[RunVariant]) -> tuple[str, list[TrainedRun]]:
    """Resolve --recipe/--steps/--smoke into extra settings (kept on ``args.settings`` so every later
    config lookup agrees) and train or reuse the variants."""
    recipe = args.recipe or (SMOKE_RECIPE if args.smoke else RECIPE)
    steps = args.steps if args.steps is not None else (SMOKE_STEPS if args.smoke else None)
    extra = list(args.settings)
    if steps is not None:
        extra += [f"train.max_steps={steps}", "train.max_epochs=null"]
    if args.smoke:
        extra += ["train.progress=false", f"train.eval_every_steps={steps}", "train.bleu_subset=0"]
    args.settings = extra
    runs_dir = args.runs_dir or Path("runs") / "experiments" / Path(recipe).stem
    return recipe, train_variants(variants, recipe, runs_dir, args.data_dir, extra, args.jobs)


def setup(args: argparse.Namespace, names: Sequence[str]) -> tuple[torch.device, str, str, list[TrainedRun],
                                                              RunConfig]:
    """What both variant experiments start with: the device and its precision, the trained runs of ``names``,
    and the recipe's resolved config (the data settings every run shares)."""
    device = resolve_device(args.device)
    recipe, runs = train_from_args(args, [VARIANTS[name] for name in names])
    config = variant_config(recipe, VARIANTS["sinusoidal"], args.settings)
    return device, resolve_precision("auto", device), recipe, runs, config

