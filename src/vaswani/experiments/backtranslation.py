"""`vaswani experiment backtranslation`: what back-translated monolingual text is worth, on Multi30k.

Multi30k's training pairs are split in two halves (a fixed draw). A reverse model (English to German) trains on
the first half and back-translates the English side of the second half, by sampling (Edunov et al. 2018) and by
beam search, into two synthetic corpora (``vaswani backtranslate``'s one function). German-English models then
train, each seed for each:

    half                  the first half only (the floor)
    bt-sample, bt-beam    the first half plus the back-translated second half
    bt-*-tagged           the same, the synthetic sources behind a <BT> tag (Caswell et al. 2019)
    all                   both halves of real pairs (the ceiling: what the second half is worth translated by people)

Every forward run has the same schedule; each is scored at its last weights by greedy BLEU on test2016 and
test2017. Each run is a plain ``vaswani train`` run under ``--runs-dir``: reused when finished, resumed when cut off.
"""

from __future__ import annotations

import argparse
import json
import statistics
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Sequence

import numpy as np

from vaswani.arguments import ranged
from vaswani.config import MAX_COUNT
from vaswani.experiments.regularization import SMOKE_SETTINGS, STUDY_SETTINGS
from vaswani.experiments.reporting import (
    device_label,
    fixed,
    log,
    markdown_table,
    provenance_line,
    pyplot,
    write_results,
)
from vaswani.experiments.variants import (
    RunVariant,
    add_runs_arguments,
    checked_runs_dir,
    load_final_model,
    train_variants,
)
from vaswani.io import atomic_write_text

RECIPE, SMOKE_RECIPE = "multi30k-cpu", "smoke"
SMOKE_PAIRS, SMOKE_TEST_LINES = 160, 8  # --smoke: the first pairs of each split only
SPLIT_SEED = 0  # the draw of the two halves: the same for every seed, so seeds vary training alone
TAG = "<BT>"
SEARCHES = ("sample", "beam")
VARIANTS = ("half", "bt-sample", "bt-beam", "bt-sample-tagged", "bt-beam-tagged", "all")
TEST_SETS = ("test2016", "test2017")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--seeds", nargs="+", type=ranged(int, ge=0, le=MAX_COUNT), default=[0, 1],
                        help="seeds every model (reverse and forward) is trained with (default 0 1)")
    parser.add_argument("--variants", nargs="+", choices=VARIANTS, default=list(VARIANTS),
                        help="forward models to train and report (default: all of them)")
    add_runs_arguments(parser, "runs/experiments/backtranslation", "train.max_epochs=20")


@dataclass
class StudyFiles:
    """The study's corpus files, written once under ``RUNS/data``: halves a and b, and the validation pairs."""

    folder: Path

    def path(self, name: str, language: str) -> Path:
        return self.folder / f"{name}.{language}"


def write_study_files(folder: Path, data_dir: Path | None, smoke: bool) -> tuple[StudyFiles, dict]:
    """The halves of Multi30k's training pairs and its validation pairs as files; the test sets' text."""
    from vaswani.data.corpora import load_corpus

    corpora = {split: load_corpus("multi30k", split, "de-en", data_dir=data_dir)
               for split in ("train", "val", *TEST_SETS)}
    limit = SMOKE_PAIRS if smoke else None
    train = corpora["train"]
    order = np.random.default_rng(SPLIT_SEED).permutation(len(train.source))[:limit]
    halves = {"a": np.sort(order[: len(order) // 2]), "b": np.sort(order[len(order) // 2:])}
    files = StudyFiles(folder)
    for name, rows in halves.items():
        for language, side in (("de", train.source), ("en", train.target)):
            write_lines(files.path(name, language), [side[i] for i in rows])
    valid = corpora["val"]
    write_lines(files.path("val", "de"), valid.source[:limit])
    write_lines(files.path("val", "en"), valid.target[:limit])
    tests = {name: (corpora[name].source[: SMOKE_TEST_LINES if smoke else None],
                    corpora[name].target[: SMOKE_TEST_LINES if smoke else None]) for name in TEST_SETS}
    return files, tests


def write_lines(path: Path, lines: Sequence[str]) -> None:
    text = "".join(line + "\n" for line in lines)
    if not path.is_file() or path.read_text(encoding="utf-8") != text:
        atomic_write_text(path, text)


def study_preset(base: str, extra: Sequence[str], out: Path, direction: str, parts: Sequence[Sequence[Path]],
                 valid: Sequence[Path], tags: Sequence[str] = ()) -> str:
    """A preset file for runs on these files: ``base`` with ``extra`` and its data section on the files."""
    from vaswani.training.config import RunConfig, apply_settings, load_preset

    config = json.loads(json.dumps(apply_settings(load_preset(base), list(extra)).to_dict()))
    config["data"].update(dataset="local", direction=direction, train_files=[[str(p) for p in part] for part in parts],
                          train_tags=list(tags), valid_files=[str(p) for p in valid], test_files={})
    config["train"]["final_test_splits"] = []  # the study scores the test sets itself, from the dataset
    RunConfig.from_dict(config)  # refused here, before any run trains, when it would be
    import yaml

    atomic_write_text(out, yaml.safe_dump(config, sort_keys=False))
    return str(out)


@dataclass
class ForwardResult:
    """One forward run: its variant, seed and greedy BLEU of its last weights on each test set."""

    variant: str
    seed: int
    bleu: dict[str, float]


def run(args: argparse.Namespace) -> int:
    from vaswani.data.textfiles import read_text_file
    from vaswani.decoding.config import EngineOptions, SearchConfig
    from vaswani.devices import resolve_device
    from vaswani.workflows.synthetic import synthesize

    device = resolve_device(args.device)
    recipe = SMOKE_RECIPE if args.smoke else RECIPE
    extra = [*STUDY_SETTINGS, *(SMOKE_SETTINGS if args.smoke else ()), *args.settings]
    if args.jobs > 1:
        extra.append("train.num_threads=1")
    runs_dir = checked_runs_dir((args.runs_dir or Path("runs") / "experiments" / "backtranslation").absolute(),
                                "backtranslation")
    (runs_dir / "data").mkdir(parents=True, exist_ok=True)
    files, tests = write_study_files(runs_dir / "data", args.data_dir, args.smoke)
    valid_de, valid_en = files.path("val", "de"), files.path("val", "en")
    reverse = study_preset(recipe, extra, runs_dir / "data" / "reverse.yaml", "en-de",
                           [(files.path("a", "en"), files.path("a", "de"))], (valid_en, valid_de))
    log(f"backtranslation: reverse models on half a ({len(args.seeds)} seed(s))")
    train_variants([RunVariant(f"reverse-seed{seed}", "reverse", (f"train.seed={seed}",), reverse)
                    for seed in args.seeds], recipe, runs_dir, None, extra, args.jobs)
    mono = read_text_file(files.path("b", "en"))
    variants = []
    for seed in args.seeds:
        synthetic = {}
        for search in [search for search in SEARCHES if any(name.startswith(f"bt-{search}") for name in args.variants)]:
            out = runs_dir / "synthetic" / f"{search}-seed{seed}"
            config = SearchConfig(sample=True, beam_size=1, seed=seed) if search == "sample" else SearchConfig(
                allow_eos=not args.smoke)  # a smoke model's beam ends at once: empty lines are no corpus
            if not (out / "backtranslated.de").is_file():
                synthesize(runs_dir / f"reverse-seed{seed}", mono, out, config, EngineOptions(device=str(device)),
                           backtranslating=True, command="experiment backtranslation")
            synthetic[search] = (out / "backtranslated.de", out / "backtranslated.en")
        half = (files.path("a", "de"), files.path("a", "en"))
        parts = {"half": [half], "all": [half, (files.path("b", "de"), files.path("b", "en"))]}
        for search, corpus in synthetic.items():
            parts[f"bt-{search}"] = parts[f"bt-{search}-tagged"] = [half, corpus]
        for name in args.variants:
            tags = ("", TAG) if name.endswith("-tagged") else ()
            preset = study_preset(recipe, extra, runs_dir / "data" / f"{name}-seed{seed}.yaml", "de-en", parts[name],
                                  (valid_de, valid_en), tags)
            variants.append(RunVariant(f"{name}-seed{seed}", name, (f"train.seed={seed}",), preset))
    log(f"backtranslation: {len(variants)} forward runs")
    trained = train_variants(variants, recipe, runs_dir, None, extra, args.jobs)
    results = [score(t.run_dir, t.variant.label, int(t.variant.settings[0].split("=")[1]), tests, device)
               for t in trained]
    rows = summarize(results)
    settings = {"recipe": recipe, "study_settings": extra, "runs_dir": str(runs_dir), "seeds": list(args.seeds),
                "split_seed": SPLIT_SEED, "tag": TAG, "smoke": args.smoke}
    write_results(args.out, "backtranslation", args.command_line, device, settings,
                  {"device": device_label(device), "runs": [asdict(r) for r in results], "variants": rows},
                  table(rows, provenance_line(device, args.command_line), extra), {"bleu": plot(rows)})
    log(f"backtranslation: wrote {args.out}/results.json, table.md, bleu.png")
    return 0


def score(run_dir: Path, variant: str, seed: int, tests: dict, device) -> ForwardResult:
    """Greedy BLEU of the run's last weights on each test set."""
    from vaswani.training.scoring import greedy_scores

    model, tokenizer = load_final_model(run_dir, device)
    bleu = {name: greedy_scores(model, tokenizer, sources, references, device, "fp32")[0].bleu
            for name, (sources, references) in tests.items()}
    log(f"  {variant}-seed{seed}: " + ", ".join(f"{name} {value:.2f}" for name, value in bleu.items()))
    return ForwardResult(variant, seed, bleu)


def summarize(results: Sequence[ForwardResult]) -> list[dict]:
    """One row a variant: the mean BLEU over its seeds on each test set, and the spread (max − min)."""
    rows = []
    for name in dict.fromkeys(r.variant for r in results):
        runs = [r for r in results if r.variant == name]
        row = {"variant": name, "seeds": len(runs)}
        for test in TEST_SETS:
            values = [r.bleu[test] for r in runs]
            row[test] = statistics.fmean(values)
            row[f"{test}_spread"] = max(values) - min(values)
        rows.append(row)
    return rows


def table(rows: Sequence[dict], provenance: str, extra: Sequence[str]) -> str:
    headers = ["forward model", "seeds", *(f"{test} BLEU" for test in TEST_SETS), *(f"{test} spread"
                                                                                 for test in TEST_SETS)]
    body = [[row["variant"], row["seeds"], *(fixed(row[test]) for test in TEST_SETS),
             *(fixed(row[f"{test}_spread"]) for test in TEST_SETS)] for row in rows]
    return (f"# Back-translation on Multi30k\n\n{markdown_table(headers, body)}\n\nGreedy BLEU of each run's last "
            f"weights, the mean over its seeds. Study settings: `{' '.join(extra)}`.\n\n{provenance}\n")


def plot(rows: Sequence[dict]):
    plt = pyplot()
    figure, axis = plt.subplots(figsize=(9, 4))
    positions = np.arange(len(rows))
    for offset, test in zip((-0.2, 0.2), TEST_SETS):
        axis.bar(positions + offset, [row[test] for row in rows], width=0.4, label=test)
    axis.set_xticks(positions, [row["variant"] for row in rows], rotation=20)
    axis.set(ylabel="greedy BLEU (mean over seeds)", title="back-translation on Multi30k")
    axis.legend()
    return figure


__all__ = ["VARIANTS", "add_arguments", "run", "study_preset", "write_lines", "write_study_files"]
