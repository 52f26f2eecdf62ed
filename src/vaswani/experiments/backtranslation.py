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
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from vaswani.arguments import ranged
from vaswani.data.textfiles import read_text_file
from vaswani.decoding.config import EngineOptions, SearchConfig
from vaswani.devices import resolve_device
from vaswani.experiments.corpus_studies import (
    TestSets,
    VariantSummary,
    score_last_weights,
    study_corpora,
    study_preset,
    summarize_variants,
    variants_plot,
    variants_table,
    write_lines,
)
from vaswani.experiments.regularization import study_settings
from vaswani.experiments.reporting import device_label, log, provenance_line, write_results
from vaswani.experiments.variants import RunVariant, add_runs_arguments, checked_runs_dir, train_variants
from vaswani.settings import MAX_COUNT
from vaswani.workflows.synthetic import synthesize

RECIPE, SMOKE_RECIPE = "multi30k-cpu", "smoke"
SMOKE_PAIRS = 160  # --smoke: the first pairs of each split only
SPLIT_SEED = 0  # the draw of the two halves: the same for every seed, so seeds vary training alone
TAG = "<BT>"
SEARCHES = ("sample", "beam")
VARIANTS = ("half", "bt-sample", "bt-beam", "bt-sample-tagged", "bt-beam-tagged", "all")


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


def write_study_files(folder: Path, data_dir: Path | None, smoke: bool) -> tuple[StudyFiles, TestSets]:
    """The halves of Multi30k's training pairs and its validation pairs as files; the test sets' text."""
    limit = SMOKE_PAIRS if smoke else None
    train, tests = study_corpora(data_dir, folder, limit)
    order = np.random.default_rng(SPLIT_SEED).permutation(len(train.source))[:limit]
    halves = {"a": np.sort(order[: len(order) // 2]), "b": np.sort(order[len(order) // 2:])}
    files = StudyFiles(folder)
    for name, rows in halves.items():
        for language, side in (("de", train.source), ("en", train.target)):
            write_lines(files.path(name, language), [side[i] for i in rows])
    return files, tests


def run(args: argparse.Namespace) -> int:
    device = resolve_device(args.device)
    recipe = SMOKE_RECIPE if args.smoke else RECIPE
    extra = study_settings(args.smoke, args.settings)
    runs_dir = checked_runs_dir((args.runs_dir or Path("runs") / "experiments" / "backtranslation").absolute(),
                                "backtranslation")
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
    results = [score_last_weights(t, tests, device) for t in trained]
    rows = summarize_variants(results)
    settings = {"recipe": recipe, "study_settings": extra, "runs_dir": str(runs_dir), "seeds": list(args.seeds),
                "split_seed": SPLIT_SEED, "tag": TAG, "smoke": args.smoke}
    write_results(args.out, "backtranslation", args.command_line, device, settings,
                  {"device": device_label(device), "runs": [asdict(r) for r in results],
                   "variants": [row.to_json() for row in rows]},
                  table(rows, provenance_line(device, args.command_line), extra),
                  {"bleu": variants_plot(rows, "back-translation on Multi30k")})
    log(f"backtranslation: wrote {args.out}/results.json, table.md, bleu.png")
    return 0


def table(rows: Sequence[VariantSummary], provenance: str, extra: Sequence[str]) -> str:
    return (f"# Back-translation on Multi30k\n\n{variants_table(rows, 'forward model')}\n\nGreedy BLEU of each run's "
            f"last weights, the mean over its seeds. Study settings: `{' '.join(extra)}`.\n\n{provenance}\n")


__all__ = ["VARIANTS", "add_arguments", "run", "write_study_files"]
