"""`vaswani experiment distillation`: a small student trained on a teacher's translations, against the same student
trained on the references (sequence-level distillation, Kim & Rush 2016), on Multi30k.

Per seed: a 256-wide teacher (multi30k-cpu's recipe at d256) trains on Multi30k; its beam search translates the
training sources on the fastest engine it can use (``vaswani distill``'s one function); the student preset
(multi30k-student: a 3-layer encoder, a 1-layer decoder) trains once on the teacher's translations and once on the
references. Each model is scored at its last weights by greedy BLEU on test2016 and test2017, and timed translating
test2016 with beam search on CTranslate2 int8 (sentences a second), where the student's speed is the point.
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
from vaswani.data.textfiles import read_text_file
from vaswani.decoding.config import EngineOptions, SearchConfig
from vaswani.decoding.translator import Translator
from vaswani.devices import resolve_device
from vaswani.experiments.corpus_studies import TEST_SETS, study_preset, write_lines
from vaswani.experiments.regularization import SMOKE_SETTINGS, STUDY_SETTINGS, WIDTHS
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
from vaswani.settings import MAX_COUNT
from vaswani.training.scoring import greedy_scores
from vaswani.workflows.synthetic import synthesize

TEACHER, STUDENT = "multi30k-cpu", "multi30k-student"
TEACHER_SETTINGS = WIDTHS["d256"]
SMOKE_RECIPE, SMOKE_STUDENT = "smoke", ("model.n_decoder_layers=1",)
SMOKE_PAIRS, SMOKE_TEST_LINES = 48, 8
MODELS = ("teacher", "student-distilled", "student-references")
SPEED_ENGINE = {"engine": "ctranslate2", "quantization": "int8"}


def _beam():  # noqa: ANN202 - a SearchConfig; the decoding package is imported when a study runs, not at --help

    # beam 4 with the length penalty CTranslate2 runs (|Y|^0.6), so that the fastest engine can decode
    return SearchConfig(beam_size=4, length_norm="power", alpha=0.6)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--seeds", nargs="+", type=ranged(int, ge=0, le=MAX_COUNT), default=[0, 1],
                        help="seeds every model is trained with (default 0 1)")
    add_runs_arguments(parser, "runs/experiments/distillation", "train.max_epochs=20")


@dataclass
class ModelResult:
    """One trained model: greedy BLEU of its last weights on each test set, and its beam speed on CTranslate2."""

    model: str
    seed: int
    bleu: dict[str, float]
    sentences_per_second: float


def run(args: argparse.Namespace) -> int:
    device = resolve_device(args.device)
    teacher_recipe, student_recipe = (SMOKE_RECIPE, SMOKE_RECIPE) if args.smoke else (TEACHER, STUDENT)
    extra = [*STUDY_SETTINGS, *(SMOKE_SETTINGS if args.smoke else ()), *args.settings]
    if args.jobs > 1:
        extra.append("train.num_threads=1")
    runs_dir = checked_runs_dir((args.runs_dir or Path("runs") / "experiments" / "distillation").absolute(),
                                "distillation")
    data = runs_dir / "data"
    data.mkdir(parents=True, exist_ok=True)
    limit = SMOKE_PAIRS if args.smoke else None
    corpora = {split: load_corpus("multi30k", split, "de-en", data_dir=args.data_dir)
               for split in ("train", "val", *TEST_SETS)}
    for split in ("train", "val"):
        write_lines(data / f"{split}.de", corpora[split].source[:limit])
        write_lines(data / f"{split}.en", corpora[split].target[:limit])
    lines = SMOKE_TEST_LINES if args.smoke else None
    tests = {name: (corpora[name].source[:lines], corpora[name].target[:lines]) for name in TEST_SETS}
    valid = (data / "val.de", data / "val.en")

    teacher_preset = study_preset(teacher_recipe, [*extra, *(() if args.smoke else TEACHER_SETTINGS)],
                                  data / "teacher.yaml", "de-en", [(data / "train.de", data / "train.en")], valid)
    log(f"distillation: teachers ({len(args.seeds)} seed(s))")
    teachers = train_variants([RunVariant(f"teacher-seed{seed}", "teacher", (f"train.seed={seed}",), teacher_preset)
                               for seed in args.seeds], teacher_recipe, runs_dir, None, extra, args.jobs)
    source = read_text_file(data / "train.de")
    students = []
    for seed in args.seeds:
        out = runs_dir / "synthetic" / f"distilled-seed{seed}"
        if not (out / "distilled.en").is_file():
            # a smoke teacher's beam ends at once (empty lines are no corpus): greedy to the length limit instead
            search = SearchConfig(beam_size=1, allow_eos=False, length_norm="power") if args.smoke else _beam()
            synthesize(runs_dir / f"teacher-seed{seed}", source, out, search,
                       EngineOptions(engine="auto", device=str(device)), backtranslating=False,
                       command="experiment distillation")
        student_extra = [*extra, *(SMOKE_STUDENT if args.smoke else ())]
        for name, files in (("student-distilled", (out / "distilled.de", out / "distilled.en")),
                            ("student-references", (data / "train.de", data / "train.en"))):
            preset = study_preset(student_recipe, student_extra, data / f"{name}-seed{seed}.yaml", "de-en", [files],
                                  valid)
            students.append(RunVariant(f"{name}-seed{seed}", name, (f"train.seed={seed}",), preset))
    log(f"distillation: {len(students)} student runs")
    trained = [*teachers, *train_variants(students, student_recipe, runs_dir, None, extra, args.jobs)]
    results = [score(t.run_dir, t.variant.label, int(t.variant.settings[0].split("=")[1]), tests, device)
               for t in trained]
    rows = summarize(results)
    settings = {"teacher": [teacher_recipe, *(() if args.smoke else TEACHER_SETTINGS)], "student": student_recipe,
                "study_settings": extra, "runs_dir": str(runs_dir), "seeds": list(args.seeds),
                "speed": {**SPEED_ENGINE, "search": "beam 4", "sentences": len(tests["test2016"][0])}}
    write_results(args.out, "distillation", args.command_line, device, settings,
                  {"device": device_label(device), "runs": [asdict(r) for r in results], "models": rows},
                  table(rows, provenance_line(device, args.command_line), extra), {"bleu_speed": plot(rows)})
    log(f"distillation: wrote {args.out}/results.json, table.md, bleu_speed.png")
    return 0


def score(run_dir: Path, model_name: str, seed: int, tests: dict, device) -> ModelResult:
    """Greedy BLEU of the run's last weights on each test set, and test2016 translated by beam on CT2 int8."""
    model, tokenizer = load_final_model(run_dir, device)
    bleu = {name: greedy_scores(model, tokenizer, sources, references, device, "fp32")[0].bleu
            for name, (sources, references) in tests.items()}
    translator = Translator.load(run_dir / "checkpoints" / "last", _beam(), EngineOptions(**SPEED_ENGINE))
    sources = tests["test2016"][0]
    translator.translate(sources[:8])  # the first call loads the converted model
    started = time.perf_counter()
    translator.translate(sources)
    speed = len(sources) / (time.perf_counter() - started)
    log(f"  {model_name}-seed{seed}: " + ", ".join(f"{name} {value:.2f}" for name, value in bleu.items())
        + f"; {speed:.1f} sentences/s")
    return ModelResult(model_name, seed, bleu, speed)


def summarize(results: Sequence[ModelResult]) -> list[dict]:
    """One row a model: means over its seeds, and its speed over the teacher's."""
    rows = []
    for name in MODELS:
        runs = [r for r in results if r.model == name]
        if runs:
            row = {"model": name, "seeds": len(runs),
                   "sentences_per_second": statistics.fmean(r.sentences_per_second for r in runs)}
            row |= {test: statistics.fmean(r.bleu[test] for r in runs) for test in TEST_SETS}
            rows.append(row)
    teacher = next((row["sentences_per_second"] for row in rows if row["model"] == "teacher"), None)
    for row in rows:
        row["speed_over_teacher"] = row["sentences_per_second"] / teacher if teacher else None
    return rows


def table(rows: Sequence[dict], provenance: str, extra: Sequence[str]) -> str:
    headers = ["model", "seeds", *(f"{test} BLEU" for test in TEST_SETS), "sentences/s (CT2 int8, beam 4)",
               "× teacher"]
    body = [[row["model"], row["seeds"], *(fixed(row[test]) for test in TEST_SETS),
             fixed(row["sentences_per_second"], 1), fixed(row["speed_over_teacher"])] for row in rows]
    return (f"# Distillation on Multi30k\n\n{markdown_table(headers, body)}\n\nGreedy BLEU of each run's last "
            f"weights and speed on test2016, the mean over seeds. Study settings: `{' '.join(extra)}`.\n\n"
            f"{provenance}\n")


def plot(rows: Sequence[dict]):
    plt = pyplot()
    figure, axis = plt.subplots(figsize=(6, 4))
    for row in rows:
        axis.scatter(row["sentences_per_second"], row["test2016"], label=row["model"])
    axis.set(xlabel="sentences/s (CTranslate2 int8, beam 4)", ylabel="greedy BLEU, test2016",
             title="distillation on Multi30k")
    axis.legend()
    return figure


__all__ = ["MODELS", "add_arguments", "run"]
