"""`vaswani experiment fine-tuning`: a Multi30k model adapted to WMT news, what it gains there and what it forgets.

The parent is a Multi30k run (``--parent RUN``; without it the study trains one with the recipe). Each condition is
a plain ``vaswani train`` run on the WMT news test sets of 2008-2015 (about 21k pairs, ``wmt17_de_en/dev_extra``),
validated on newstest2016:

    fine-tuned           --init-from the parent: its weights, model and tokenizer; a short schedule, a low peak
    fine-tuned-decoder   the same with the encoder frozen (train.freeze=encoder)
    scratch              the recipe on the news pairs alone, from random weights, its whole schedule
    mixed                the recipe from random weights on Multi30k and the news pairs, news weighted up

Every model (the parent included) is then scored with one search on newstest2016 (the set runs choose on),
newstest2017 (the test) and Multi30k test2016 (what the parent was for: the forgetting), so the rows differ only in
how the model was trained. scratch and mixed train the recipe's whole schedule (an hour or more each on 2 cores);
``--conditions`` picks the ones to run.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from vaswani.arguments import ranged
from vaswani.data.download import default_data_dir
from vaswani.decoding.config import EngineOptions, SearchConfig
from vaswani.decoding.translator import Translator
from vaswani.devices import resolve_device
from vaswani.errors import ConfigError
from vaswani.evaluation.evaluate import load_test_set
from vaswani.evaluation.metrics import corpus_scores
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
from vaswani.settings import MAX_COUNT
from vaswani.training.parent import find_parent
from vaswani.training.summary import SUMMARY_FILE, RunSummary

RECIPE, SMOKE_RECIPE = "multi30k-cpu", "smoke"
NEWS_YEARS = ("news-test2008", "newstest2009", "newstest2010", "newstest2011", "newstest2012", "newstest2013",
              "newstest2014", "newstest2015")
CONDITIONS = ("fine-tuned", "fine-tuned-decoder", "scratch", "mixed")
# Every run: by epochs, no clock and no clock fit; its last weights are scored by this study, not by the run.
STUDY_SETTINGS = ("train.scale_up_models=", "train.max_minutes=null", "train.decay_on_clock=false",
                  "train.patience=null", "train.final_model=false", "train.final_test_splits=",
                  "train.progress=false", "train.precision=fp32")
# Fine-tuning: a fifth of the recipe's peak and a short warmup, so that the first updates keep what the parent knows.
FINE_TUNE_SETTINGS = ("train.lr=0.0003", "train.warmup_steps=100")
SMOKE_SETTINGS = ("train.max_steps=6", "train.max_epochs=null", "train.eval_every_steps=3", "train.bleu_subset=4")
NEWS_WEIGHT = 2.0  # mixed: each news pair twice per epoch against each Multi30k pair once (about 21k against 29k)
SCORING_BEAM = 5


@dataclass
class ModelScores:
    """One model's BLEU on each set, with the one search every model is scored with, and how it was trained (the
    conditions may differ in width and budget: the clock fit chooses the parent's width, ``--set`` the others')."""

    condition: str
    checkpoint: str
    d_model: int
    updates: int | None  # this run's own optimizer updates; None: its run directory holds no summary.json
    train_minutes: float | None
    newstest2016: float
    newstest2017: float
    multi30k_test2016: float


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--parent", type=Path, default=None, metavar="RUN",
                        help="the Multi30k run to fine-tune (default: the study trains one with the recipe)")
    parser.add_argument("--conditions", nargs="+", choices=CONDITIONS, default=["fine-tuned", "fine-tuned-decoder"],
                        help="what to train (default: the two fine-tunings; scratch and mixed train the whole "
                        "recipe, an hour or more each)")
    parser.add_argument("--epochs", type=ranged(int, ge=1, le=MAX_COUNT), default=5,
                        help="epochs of news a fine-tuning trains (default 5)")
    add_runs_arguments(parser, "runs/experiments/fine-tuning", "train.seed=1")


def news_files(data_dir: Path, smoke: bool) -> dict[str, str]:
    """The data settings of each kind of run: the news pairs to train on, newstest2016 to validate on."""
    wmt = data_dir / "wmt17_de_en"
    years = NEWS_YEARS[:1] if smoke else NEWS_YEARS
    missing = [path for path in (wmt / "newstest2016.de", wmt / f"dev_extra/{years[0]}.de") if not path.is_file()]
    if missing:
        raise ConfigError(f"{missing[0]}: missing; this study needs the WMT news test sets in the data folder "
                          "(--data-dir or VASWANI_DATA)")
    return {"train": ";".join(f"{wmt / 'dev_extra' / year}.de,{wmt / 'dev_extra' / year}.en" for year in years),
            "valid": f"{wmt / 'newstest2016.de'},{wmt / 'newstest2016.en'}",
            "multi30k": f"{data_dir / 'multi30k/train.de.gz'},{data_dir / 'multi30k/train.en.gz'}"}


def condition_variants(conditions: Sequence[str], parent: Path | None, files: dict[str, str], epochs: int,
                       runs_dir: Path) -> list[RunVariant]:
    """The runs of ``conditions``, led by the parent's own when none is given (trained in ``runs_dir``)."""
    news = ("data.dataset=local", f"data.train_files={files['train']}", f"data.valid_files={files['valid']}")
    parts = len(files["train"].split(";"))
    variants = []
    if parent is None:
        variants.append(RunVariant("parent", "parent: the recipe on Multi30k", ()))
    parent_dir = runs_dir / "parent" if parent is None else parent
    for condition in conditions:
        if condition.startswith("fine-tuned"):
            frozen = ("train.freeze=encoder",) if condition == "fine-tuned-decoder" else ()
            settings = (*news, f"train.init_from={parent_dir}", f"train.max_epochs={epochs}", *FINE_TUNE_SETTINGS,
                        *frozen)
        elif condition == "scratch":
            settings = news
        else:
            settings = ("data.dataset=local", f"data.train_files={files['multi30k']};{files['train']}",
                        f"data.valid_files={files['valid']}",
                        f"data.train_weights={','.join(['1', *[str(NEWS_WEIGHT)] * parts])}")
        variants.append(RunVariant(condition, condition, settings))
    return variants


def run(args: argparse.Namespace) -> int:
    device = resolve_device(args.device)
    # where the runs go is checked before what they read: a wrong destination is named first, as in every study
    runs_dir = checked_runs_dir(args.runs_dir or Path("runs") / "experiments" / "fine-tuning", "fine-tuning",
                                [args.parent])
    data_dir = args.data_dir or default_data_dir()
    if data_dir is None:
        raise ConfigError("this study reads the WMT news test sets from the data folder: pass --data-dir DIR or set "
                          "VASWANI_DATA")
    files = news_files(data_dir, args.smoke)
    recipe = SMOKE_RECIPE if args.smoke else RECIPE
    extra = [*STUDY_SETTINGS, *(SMOKE_SETTINGS if args.smoke else ()), *args.settings]
    variants = condition_variants(args.conditions, args.parent, files, args.epochs, runs_dir)
    if args.parent is None:  # the parent first: the fine-tunings start from it
        train_variants(variants[:1], recipe, runs_dir, data_dir, extra, 1)
    trained = train_variants([v for v in variants if v.name != "parent"], recipe, runs_dir, data_dir, extra,
                             args.jobs)
    parent = args.parent if args.parent is not None else runs_dir / "parent"
    # the parent as the fine-tunings start from it; a run trained here at its last weights
    models = [("parent", find_parent(parent).checkpoint)] + [(t.variant.name, t.run_dir) for t in trained]
    scores = [score_model(name, path, data_dir, device, args.smoke) for name, path in models]
    for row in scores:
        log(f"  {row.condition}: newstest2016 {row.newstest2016:.2f}, newstest2017 {row.newstest2017:.2f}, "
            f"Multi30k test2016 {row.multi30k_test2016:.2f}")
    settings = {"recipe": recipe, "study_settings": extra, "fine_tune_settings": list(FINE_TUNE_SETTINGS),
                "epochs": args.epochs, "runs_dir": str(runs_dir), "parent": str(parent),
                "news_train": list(NEWS_YEARS[:1] if args.smoke else NEWS_YEARS), "scoring_beam": SCORING_BEAM}
    write_results(args.out, "fine-tuning", args.command_line, device, settings,
                  {"device": device_label(device), "models": [asdict(s) for s in scores]},
                  table(scores, provenance_line(device, args.command_line)), {"bleu": plot(scores)},
                  readme=findings(scores))
    log(f"fine-tuning: wrote {args.out}/results.json, table.md, README.md, bleu.png")
    return 0


def run_summary(checkpoint: Path) -> RunSummary | None:
    """The summary of the run a checkpoint belongs to (``RUN/checkpoints/NAME``), if it finished."""
    run_dir = checkpoint.resolve().parent.parent
    return RunSummary.read(run_dir) if (run_dir / SUMMARY_FILE).is_file() else None


def score_model(condition: str, run_or_checkpoint: Path, data_dir: Path, device, smoke: bool) -> ModelScores:
    """BLEU of the model's last weights on the three sets, with beam 5 (length penalty power 1.0) on the engine
    `vaswani translate` would choose."""
    checkpoint = resolve_checkpoint(run_or_checkpoint / "checkpoints" / "last"
                                    if (run_or_checkpoint / "checkpoints").is_dir() else run_or_checkpoint)
    summary = run_summary(checkpoint)
    search = SearchConfig(beam_size=SCORING_BEAM, length_norm="power", alpha=1.0)
    translator = Translator.load(checkpoint, search, EngineOptions(device=str(device)))
    wmt = data_dir / "wmt17_de_en"
    sets = {"newstest2016": (wmt / "newstest2016.de", wmt / "newstest2016.en"),
            "newstest2017": (wmt / "newstest2017.de", wmt / "newstest2017.en"),
            "multi30k_test2016": (data_dir / "multi30k/test_2016_flickr.de.gz",
                                  data_dir / "multi30k/test_2016_flickr.en.gz")}
    bleu = {}
    for name, (source, reference) in sets.items():
        test = load_test_set(src=source, ref=reference)
        sources, references = (test.sources[:8], test.references[:8]) if smoke else (test.sources, test.references)
        bleu[name] = corpus_scores(translator.translate(sources, progress=True), references).bleu
    return ModelScores(condition, str(checkpoint), translator.model_config.d_model,
                       summary.step if summary else None, summary.minutes if summary else None, **bleu)


def table(scores: Sequence[ModelScores], provenance: str) -> str:
    headers = ["model", "width", "its updates", "its minutes", "newstest2016 (selection)", "newstest2017 (test)",
               "Multi30k test2016 (forgetting)"]
    rows = [[s.condition, str(s.d_model), "—" if s.updates is None else f"{s.updates:,}",
             "—" if s.train_minutes is None else f"{s.train_minutes:.1f}", fixed(s.newstest2016),
             fixed(s.newstest2017), fixed(s.multi30k_test2016)] for s in scores]
    return (f"# Fine-tuning a Multi30k model on WMT news\n\nBLEU (sacreBLEU) of each model's last weights, beam "
            f"{SCORING_BEAM}, length penalty power 1.0. A fine-tuning's updates and minutes are its own, on top of "
            f"the parent's.\n\n{markdown_table(headers, rows)}\n\n{provenance}\n")


def plot(scores: Sequence[ModelScores]):
    plt = pyplot()
    figure, axis = plt.subplots(figsize=(8, 4.5))
    sets = [("newstest2016", "newstest2016"), ("newstest2017", "newstest2017"), ("multi30k_test2016",
                                                                                 "Multi30k test2016")]
    width = 0.8 / len(scores)
    for index, row in enumerate(scores):
        axis.bar([i + index * width for i in range(len(sets))], [getattr(row, field) for field, _ in sets], width,
                 label=row.condition)
    axis.set_xticks([i + 0.4 - width / 2 for i in range(len(sets))], [label for _, label in sets])
    axis.set(ylabel="BLEU", title="each model on news and on Multi30k")
    axis.legend(fontsize=8)
    axis.grid(axis="y", alpha=0.3)
    return figure


def findings(scores: Sequence[ModelScores]) -> str:
    parent = next(s for s in scores if s.condition == "parent")
    lines = ["# Fine-tuning study: what a Multi30k model gains on news and what it forgets", "",
             "Written by `vaswani experiment fine-tuning` (command, commit and hardware in `results.json` and "
             "`table.md`). Every model is scored with the same search; newstest2017 is read by no run.", ""]
    for s in scores:
        if s.condition == "parent":
            continue
        gain, forgotten = s.newstest2017 - parent.newstest2017, s.multi30k_test2016 - parent.multi30k_test2016
        lines.append(f"- **{s.condition}**: newstest2017 {s.newstest2017:.2f} ({gain:+.2f} against the parent), "
                     f"Multi30k test2016 {s.multi30k_test2016:.2f} ({forgotten:+.2f}).")
    return "\n".join(lines)


__all__ = ["CONDITIONS", "ModelScores", "add_arguments", "condition_variants", "findings", "run"]
