"""`vaswani experiment distillation`: a small student trained on a teacher's translations, against the same student
trained on the references (sequence-level distillation, Kim & Rush 2016), on Multi30k.

Per seed: a 256-wide teacher (multi30k-cpu's recipe at d256) trains on Multi30k, or ``--teacher`` names one run
that already did (every seed's students then learn from its one set of translations); its beam search translates the
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
from vaswani.data.languages import recorded_languages
from vaswani.data.textfiles import read_text_file
from vaswani.decoding.config import EngineOptions, SearchConfig
from vaswani.decoding.translator import Translator
from vaswani.devices import resolve_device
from vaswani.errors import ConfigError
from vaswani.experiments.corpus_studies import (
    TestSets,
    VariantResult,
    VariantSummary,
    score_last_weights,
    study_corpora,
    study_preset,
    summarize_variants,
    variants_table,
    write_lines,
)
from vaswani.experiments.regularization import WIDTHS, study_settings
from vaswani.experiments.reporting import device_label, fixed, log, provenance_line, pyplot, write_results
from vaswani.experiments.variants import RunVariant, TrainedRun, add_runs_arguments, checked_runs_dir, train_variants
from vaswani.io import file_sha256, read_yaml
from vaswani.settings import MAX_COUNT
from vaswani.training.config import RunConfig
from vaswani.training.summary import SUMMARY_FILE, RunSummary
from vaswani.workflows.synthetic import made_by, synthesize

TEACHER, STUDENT = "multi30k-cpu", "multi30k-student"
TEACHER_SETTINGS = WIDTHS["d256"]
SMOKE_RECIPE, SMOKE_STUDENT = "smoke", ("model.n_decoder_layers=1",)
SMOKE_PAIRS = 48
MODELS = ("teacher", "student-distilled", "student-references")
SPEED_ENGINE = {"engine": "ctranslate2", "quantization": "int8"}
LAST_CHECKPOINT, WEIGHTS = Path("checkpoints") / "last", "model.safetensors"  # every model is scored at its last
LAST_WEIGHTS = LAST_CHECKPOINT / WEIGHTS


def _beam() -> SearchConfig:
    # beam 4 with the length penalty CTranslate2 runs (|Y|^0.6), so that the fastest engine can decode
    return SearchConfig(beam_size=4, length_norm="power", alpha=0.6)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--seeds", nargs="+", type=ranged(int, ge=0, le=MAX_COUNT), default=[0, 1],
                        help="seeds every model is trained with (default 0 1)")
    parser.add_argument("--teacher", type=Path, default=None, metavar="RUN",
                        help="a run that trained a German-English teacher on Multi30k's training pairs, distilled "
                        "at its last weights (as the study scores every model) instead of training a teacher per seed")
    add_runs_arguments(parser, "runs/experiments/distillation", "train.max_epochs=20")


@dataclass
class ModelResult:
    """One trained model: greedy BLEU of its last weights on each test set, and its beam speed on CTranslate2."""

    model: str
    seed: int
    bleu: dict[str, float]
    sentences_per_second: float


@dataclass
class ModelSummary:
    """One model's row: its BLEU over the seeds, its mean speed, and that speed over the teacher's."""

    scores: VariantSummary
    sentences_per_second: float
    speed_over_teacher: float | None = None

    def to_json(self) -> dict[str, str | int | float | None]:
        """The row as results.json holds it: the means, without the spread the table leaves out."""
        return {"model": self.scores.variant, "seeds": self.scores.seeds,
                "sentences_per_second": self.sentences_per_second, **self.scores.bleu,
                "speed_over_teacher": self.speed_over_teacher}


def run(args: argparse.Namespace) -> int:
    device = resolve_device(args.device)
    teacher_recipe, student_recipe = (SMOKE_RECIPE, SMOKE_RECIPE) if args.smoke else (TEACHER, STUDENT)
    extra = study_settings(args.smoke, args.settings)
    runs_dir = checked_runs_dir((args.runs_dir or Path("runs") / "experiments" / "distillation").absolute(),
                                "distillation")
    data = runs_dir / "data"
    limit = SMOKE_PAIRS if args.smoke else None
    train, tests = study_corpora(args.data_dir, data, limit)
    write_lines(data / "train.de", train.source[:limit])
    write_lines(data / "train.en", train.target[:limit])
    valid = (data / "val.de", data / "val.en")

    teacher_preset = study_preset(teacher_recipe, [*extra, *(() if args.smoke else TEACHER_SETTINGS)],
                                  data / "teacher.yaml", "de-en", [(data / "train.de", data / "train.en")], valid)
    if args.teacher is None:
        log(f"distillation: teachers ({len(args.seeds)} seed(s))")
        teachers = train_variants([RunVariant(f"teacher-seed{seed}", "teacher", (f"train.seed={seed}",),
                                              teacher_preset) for seed in args.seeds],
                                  teacher_recipe, runs_dir, None, extra, args.jobs)
    else:
        teachers = [given_teacher(args.teacher)]
    source = read_text_file(data / "train.de")
    students = []
    for seed in args.seeds:
        # the teacher translates with its last weights, at which the study scores it, as it scores every model
        teacher = (teachers[0].run_dir if args.teacher else runs_dir / f"teacher-seed{seed}") / LAST_CHECKPOINT
        # a given teacher's translations serve every seed, in a folder named by its weights
        out = runs_dir / "synthetic" / (f"distilled-{file_sha256(teacher / WEIGHTS)[:12]}" if args.teacher
                                        else f"distilled-seed{seed}")
        if not made_by(out, teacher):
            # a smoke teacher's beam ends at once (empty lines are no corpus): greedy to the length limit instead
            search = SearchConfig(beam_size=1, allow_eos=False, length_norm="power") if args.smoke else _beam()
            synthesize(teacher, source, out, search,
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
    results = [score(t, tests, device) for t in trained]
    rows = summarize(results)
    teacher = (asdict(GivenTeacher.of(args.teacher)) if args.teacher
               else [teacher_recipe, *(() if args.smoke else TEACHER_SETTINGS)])
    settings = {"teacher": teacher, "student": student_recipe,
                "study_settings": extra, "runs_dir": str(runs_dir), "seeds": list(args.seeds),
                "speed": {**SPEED_ENGINE, "search": "beam 4", "sentences": len(tests["test2016"][0])}}
    write_results(args.out, "distillation", args.command_line, device, settings,
                  {"device": device_label(device), "runs": [asdict(r) for r in results],
                   "models": [row.to_json() for row in rows]},
                  table(rows, provenance_line(device, args.command_line), extra), {"bleu_speed": plot(rows)})
    log(f"distillation: wrote {args.out}/results.json, table.md, bleu_speed.png")
    return 0


@dataclass(frozen=True)
class GivenTeacher:
    """The teacher ``--teacher`` named, as results.json records it: which weights, after how much training."""

    run: str
    last_weights_sha256: str
    updates: int | None  # None: the run wrote no summary.json (it is still training, or was killed)
    epochs: int | None
    stop_reason: str | None

    @classmethod
    def of(cls, run_dir: Path) -> GivenTeacher:
        summary = RunSummary.read(run_dir) if (run_dir / SUMMARY_FILE).is_file() else None
        return cls(str(run_dir.absolute()), file_sha256(run_dir / LAST_WEIGHTS), summary and summary.step,
                   summary and summary.epoch, summary and summary.stop_reason.value)


def given_teacher(run_dir: Path) -> TrainedRun:
    """The run ``--teacher`` names, as a study's teacher: a German-English run with its last weights."""
    if not (run_dir / LAST_WEIGHTS).is_file():
        raise ConfigError(f"--teacher {run_dir}: no {LAST_WEIGHTS}; give the directory of a run that trained the "
                          "teacher (`vaswani train --run-dir`)")
    languages = recorded_languages(run_dir)
    if languages is not None and (languages.source, languages.target) != ("de", "en"):
        raise ConfigError(f"--teacher {run_dir}: it translates {languages.source} to {languages.target}; the study "
                          "distills a German-English teacher")
    seed = RunConfig.from_dict(read_yaml(run_dir / "config.yaml", "teacher's settings"),
                               str(run_dir / "config.yaml")).train.seed
    return TrainedRun(RunVariant(f"teacher-seed{seed}", "teacher", (f"train.seed={seed}",)), run_dir.absolute(),
                      reused=True)


def score(run: TrainedRun, tests: TestSets, device) -> ModelResult:
    """Greedy BLEU of the run's last weights on each test set, and test2016 translated by beam on CT2 int8."""
    scores = score_last_weights(run, tests, device)
    translator = Translator.load(run.run_dir / LAST_CHECKPOINT, _beam(), EngineOptions(**SPEED_ENGINE))
    sources = tests["test2016"][0]
    translator.translate(sources[:8])  # the first call loads the converted model
    started = time.perf_counter()
    translator.translate(sources)
    speed = len(sources) / (time.perf_counter() - started)
    log(f"  {scores.variant}-seed{scores.seed}: {speed:.1f} sentences/s")
    return ModelResult(scores.variant, scores.seed, scores.bleu, speed)


def summarize(results: Sequence[ModelResult]) -> list[ModelSummary]:
    """One row a model, in the order of :data:`MODELS`: means over its seeds, and its speed over the teacher's."""
    ordered = sorted(results, key=lambda r: MODELS.index(r.model))
    rows = [ModelSummary(scores, statistics.fmean(r.sentences_per_second for r in results if r.model == scores.variant))
            for scores in summarize_variants([VariantResult(r.model, r.seed, r.bleu) for r in ordered])]
    teacher = next((row.sentences_per_second for row in rows if row.scores.variant == "teacher"), None)
    for row in rows:
        row.speed_over_teacher = row.sentences_per_second / teacher if teacher else None
    return rows


def table(rows: Sequence[ModelSummary], provenance: str, extra: Sequence[str]) -> str:
    speeds = {"sentences/s (CT2 int8, beam 4)": [fixed(row.sentences_per_second, 1) for row in rows],
              "× teacher": [fixed(row.speed_over_teacher) for row in rows]}
    return (f"# Distillation on Multi30k\n\n{variants_table([row.scores for row in rows], 'model', False, speeds)}"
            f"\n\nGreedy BLEU of each run's last weights and speed on test2016, the mean over seeds. Study settings: "
            f"`{' '.join(extra)}`.\n\n{provenance}\n")


def plot(rows: Sequence[ModelSummary]):
    plt = pyplot()
    figure, axis = plt.subplots(figsize=(6, 4))
    for row in rows:
        axis.scatter(row.sentences_per_second, row.scores.bleu["test2016"], label=row.scores.variant)
    axis.set(xlabel="sentences/s (CTranslate2 int8, beam 4)", ylabel="greedy BLEU, test2016",
             title="distillation on Multi30k")
    axis.legend()
    return figure


__all__ = ["MODELS", "add_arguments", "run"]
