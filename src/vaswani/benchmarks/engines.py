"""`vaswani bench engines`: `vaswani translate` of a test set on each engine, and a bare CTranslate2 script on the
same converted model, each timed as the command a user runs (start-up included).

Every repeat runs every command once, in an order that rotates from repeat to repeat, so a drift in the machine's
load hits all of them alike; each figure is the median of the repeats (min–max beside it). The commands:

- ``vaswani translate --engine torch`` (our search, the reference),
- ``vaswani translate --engine ctranslate2 --quantization Q`` for each ``--quantizations`` Q,
- ``bare_ctranslate2.py`` (ctranslate2 + tokenizers and nothing else, see that file) on the conversion the engine
  loaded, for each Q: the same model, beam and length penalty, one ``translate_batch`` call.

All of them translate with the checkpoint's stored search (``search.json``) at ``--beam``, on ``--threads``
threads; a stored GNMT length penalty, which CTranslate2 cannot rank a beam by, is measured as the power |Y|^α
with the same α. The conversions are made, and every command run once, before the timed repeats. Each output is scored
(sacreBLEU), and an empty input gives each command's start-up time alone. The commands run with Python's bytecode
cache on (in a directory of the run's own), as an installed package does even where the environment says
PYTHONDONTWRITEBYTECODE: otherwise every timed `vaswani translate` would compile vaswani's source again, a cost
no installed copy pays and the bare script (whose libraries come compiled) never does.

``--profile`` adds where vaswani's time goes on CTranslate2 (cProfile, which slows Python code by a constant
factor, so its figures are shares, not timings): the start-up (``vaswani translate`` of an empty input, by phase),
and the translation (the time inside CTranslate2's ``translate_batch`` against the Python around it, per batch).
Written to ``--out``: results.json (every run, with provenance), table.md, and profile.md with ``--profile``.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from vaswani.arguments import ranged
from vaswani.benchmarks.engine_profile import profile_translate, render_profile
from vaswani.data.commands import add_data_dir_argument
from vaswani.data.corpora import load_corpus
from vaswani.decoding import EngineOptions
from vaswani.decoding.config import QUANTIZATIONS, StoredSearch
from vaswani.decoding.ct2_engine import length_exponent
from vaswani.decoding.translator import Translator
from vaswani.errors import VaswaniError
from vaswani.evaluation.metrics import corpus_scores
from vaswani.io import atomic_write_json, atomic_write_text, check_output
from vaswani.model.serialization import resolve_checkpoint
from vaswani.provenance import Provenance, provenance, provenance_lines
from vaswani.records import to_json
from vaswani.settings import MAX_COUNT, MAX_LENGTH, MAX_THREADS

if TYPE_CHECKING:
    from vaswani.benchmarks.engine_profile import EngineProfile
    from vaswani.decoding.config import SearchConfig

BARE_SCRIPT = Path(__file__).with_name("bare_ctranslate2.py")
RESULT_FILES = ("results.json", "table.md", "profile.md")
DEFAULT_QUANTIZATIONS = {"cpu": ["float32", "int8"], "cuda": ["float16", "int8_float16", "bfloat16"]}

Command = Callable[[Path, Path], list[str]]  # (input, output) -> argv


@dataclass(frozen=True)
class Stamp:
    """Where and how a report was made (vaswani.provenance.provenance): the first keys of results.json."""

    command: str
    git: dict[str, Any]
    hardware: dict[str, Any]
    versions: dict[str, Any]

    def provenance(self) -> Provenance:
        """These keys as the typed record, every field checked (a file read back may be damaged)."""
        return Provenance.from_json(vars(self))


@dataclass(frozen=True)
class EngineRun:
    """One timed run of one command: on the test set, and on an empty input (its start-up)."""

    command: str
    repeat: int
    seconds: float
    start_up_seconds: float


@dataclass(frozen=True)
class EngineRow:
    """A command's line of table.md: the median of its repeats, with their spread."""

    command: str
    bare: bool
    quantization: str | None  # None: the torch engine
    seconds: float
    sentences_per_s: float
    sentences_per_s_min: float
    sentences_per_s_max: float
    start_up_seconds: float
    bleu: float


@dataclass(frozen=True)
class EngineRatio:
    """`vaswani translate` on CTranslate2 at one quantization against the bare script (and torch, when timed)."""

    quantization: str
    over_bare: float
    over_bare_per_repeat: list[float]
    start_up_over_bare: float
    lines_unlike_bare: int
    over_torch: float | None = None  # None, and absent from the JSON, without the torch engine
    lines_unlike_torch: int | None = None


@dataclass(frozen=True)
class BenchSearch:
    """The search every command ran with."""

    beam_size: int
    length_norm: str
    alpha: float
    max_len_a: float
    max_len_b: int


@dataclass(frozen=True)
class EnginesReport(Stamp):
    """results.json of `vaswani bench engines`."""

    checkpoint: str
    test_set: str
    sentences: int
    search: BenchSearch
    threads: int
    device: str
    repeats: int
    runs: list[EngineRun]
    rows: list[EngineRow]
    ratios: list[EngineRatio]
    profile: EngineProfile | None = None  # None, and absent from the JSON, without --profile

    def write(self, path: Path) -> None:
        """Write results.json, without the keys of what a run did not measure."""
        value = to_json(self)
        if self.profile is None:
            del value["profile"]
        for ratio in value["ratios"]:
            if ratio["over_torch"] is None:
                del ratio["over_torch"], ratio["lines_unlike_torch"]
        atomic_write_json(path, value)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--checkpoint", required=True, metavar="RUN", help="checkpoint or run directory")
    parser.add_argument("--dataset", default="multi30k")
    parser.add_argument("--split", default="test2016")
    parser.add_argument("--sentences", type=ranged(int, ge=1, le=MAX_COUNT), default=None,
                        help="the first N (default: all)")
    add_data_dir_argument(parser)
    parser.add_argument("--beam", type=ranged(int, ge=1, le=MAX_LENGTH), default=5)
    parser.add_argument("--threads", type=ranged(int, ge=1, le=MAX_THREADS), default=2,
                        help="CPU threads of every engine")
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu",
                        help="where every engine runs (cuda: torch on the GPU, CTranslate2's CUDA build)")
    parser.add_argument("--quantizations", nargs="+", default=None, choices=QUANTIZATIONS,
                        help="CTranslate2's (default: float32 int8 on the CPU, float16 int8_float16 bfloat16 on a GPU)")
    parser.add_argument("--repeats", type=ranged(int, ge=1, le=MAX_COUNT), default=3)
    parser.add_argument("--torch", action=argparse.BooleanOptionalAction, default=True,
                        help="time the torch engine too (--no-torch: only CTranslate2 against the bare script, whose "
                        "ratio is what vaswani's overhead costs)")
    parser.add_argument("--profile", action="store_true",
                        help="also profile vaswani translate on CTranslate2: its start-up by phase, and the Python "
                        "around each batch's search (profile.md)")
    parser.add_argument("--out", type=Path, default=None, help="directory for results.json and table.md")


def run(args: argparse.Namespace) -> int:
    if args.out is not None:
        check_output(args.out, command="bench engines", writes="files", inputs=[args.checkpoint, args.data_dir],
                     names=RESULT_FILES)
    stamp = Stamp(**provenance(args.device).to_json())  # before anything is written
    quantizations = args.quantizations or DEFAULT_QUANTIZATIONS[args.device]
    checkpoint = resolve_checkpoint(args.checkpoint)
    search = StoredSearch.read(checkpoint).search(beam_size=args.beam)
    if search.length_norm == "gnmt":
        search = dataclasses.replace(search, length_norm="power")
    corpus = load_corpus(args.dataset, args.split, data_dir=args.data_dir)
    sources, references = corpus.source[: args.sentences], corpus.target[: args.sentences]
    conversions = {q: Translator.load(checkpoint, search, EngineOptions(engine="ctranslate2", quantization=q,
                                                                        device=args.device)).engine.directory
                   for q in quantizations}  # converted now, outside the timed runs
    with tempfile.TemporaryDirectory() as workdir:
        work = Path(workdir)
        (work / "source.txt").write_text("".join(line + "\n" for line in sources), encoding="utf-8")
        (work / "empty.txt").write_text("", encoding="utf-8")
        env = command_environment(work / "pycache")
        commands = _commands(checkpoint, search, length_exponent(search), conversions, args.threads, args.device,
                             args.torch)
        for name, command in commands.items():  # untimed: file and bytecode caches, lazily built things
            _timed(command(work / "source.txt", work / "warm-up.txt"), env)
        runs: list[EngineRun] = []
        names = list(commands)
        for repeat in range(args.repeats):
            order = names[repeat % len(names):] + names[: repeat % len(names)]
            for name in order:
                seconds = _timed(commands[name](work / "source.txt", work / f"{name}.txt"), env)
                start_up = _timed(commands[name](work / "empty.txt", work / "empty-out.txt"), env)
                runs.append(EngineRun(name, repeat, seconds, start_up))
            print(f"repeat {repeat + 1}/{args.repeats} done", flush=True)
        bleu = {name: round(corpus_scores((work / f"{name}.txt").read_text(encoding="utf-8").splitlines(),
                                          references).bleu, 2) for name in commands}
        outputs = {name: (work / f"{name}.txt").read_text(encoding="utf-8") for name in commands}
        profile = None
        if args.profile and quantizations:
            quantization = quantizations[-1]
            profile = profile_translate(commands[f"vaswani translate, ctranslate2 {quantization}"], work, env,
                                        quantization)
    report = dataclasses.replace(_report(stamp, args, checkpoint, search, commands, runs, bleu, outputs,
                                         len(sources)), profile=profile)
    print(render_table(report))
    if args.out is not None:
        report.write(args.out / RESULT_FILES[0])
        atomic_write_text(args.out / RESULT_FILES[1], render_table(report))
        print(f"wrote {args.out / RESULT_FILES[0]} and {args.out / RESULT_FILES[1]}")
        if profile is not None:
            atomic_write_text(args.out / RESULT_FILES[2], render_profile(profile, report))
            print(f"wrote {args.out / RESULT_FILES[2]}")
    return 0


def command_environment(bytecode: Path) -> dict[str, str]:
    """This process's environment with Python's bytecode cache on, kept in ``bytecode`` (never the source tree)."""
    env = {**os.environ, "PYTHONPYCACHEPREFIX": str(bytecode)}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def _commands(checkpoint: Path, search: SearchConfig, exponent: float, conversions: dict[str, Path], threads: int,
              device: str, torch: bool = True) -> dict[str, Command]:
    """Command name -> function(input, output) -> argv."""
    def translate(engine: str, *extra: str) -> Command:
        return lambda source, out: [sys.executable, "-m", "vaswani", "translate", "--checkpoint", str(checkpoint),
                                    "--engine", engine, *extra, "--beam", str(search.beam_size), "--length-norm",
                                    search.length_norm, "--alpha", repr(search.alpha), "--threads", str(threads),
                                    "--device", device, "--input", str(source), "--output", str(out)]

    def bare(quantization: str) -> Command:
        return lambda source, out: [sys.executable, str(BARE_SCRIPT), str(conversions[quantization]),
                                    str(checkpoint / "tokenizer.json"), str(source), str(out), "--beam",
                                    str(search.beam_size), "--length-penalty", repr(exponent), "--max-len-a",
                                    repr(search.max_len_a), "--max-len-b", str(search.max_len_b), "--threads",
                                    str(threads), "--device", device]

    commands = {"vaswani translate, torch": translate("torch")} if torch else {}
    for quantization in conversions:
        commands[f"vaswani translate, ctranslate2 {quantization}"] = translate("ctranslate2", "--quantization",
                                                                             quantization)
        commands[f"bare ctranslate2 script, {quantization}"] = bare(quantization)
    return commands


def _timed(argv: list[str], env: dict[str, str] | None = None) -> float:
    started = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True, env=env)
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        lines = [line for line in done.stderr.splitlines() if line.strip()]
        raise VaswaniError(f"{' '.join(argv[:4])} … failed: {lines[-1] if lines else f'exit {done.returncode}'}")
    return seconds


def _report(stamp: Stamp, args: argparse.Namespace, checkpoint: Path, search: SearchConfig,
            commands: dict[str, Command], runs: list[EngineRun], bleu: dict[str, float], outputs: dict[str, str],
            sentences: int) -> EnginesReport:
    rows = []
    for name in commands:
        seconds = [r.seconds for r in runs if r.command == name]
        start_up = statistics.median(r.start_up_seconds for r in runs if r.command == name)
        median = statistics.median(seconds)
        quantization = None if name.endswith("torch") else name.rsplit(" ", 1)[-1]
        rows.append(EngineRow(name, name.startswith("bare"), quantization, median, sentences / median,
                              sentences / max(seconds), sentences / min(seconds), start_up, bleu[name]))
    by = {row.command: row for row in rows}
    torch_row = by.get("vaswani translate, torch")
    ratios = []
    for row in rows:
        if row.bare or row.quantization is None:
            continue
        bare = by[f"bare ctranslate2 script, {row.quantization}"]
        # The bare script's time over ours in each repeat (both ran in it, one after the other): the spread of these
        # says how far the machine's load moved the ratio.
        pairs = [(ours, theirs) for ours in runs if ours.command == row.command for theirs in runs
                 if theirs.command == bare.command and theirs.repeat == ours.repeat]
        per_repeat = sorted(theirs.seconds / ours.seconds for ours, theirs in pairs)
        start_ups = sorted(theirs.start_up_seconds / ours.start_up_seconds for ours, theirs in pairs)
        ratios.append(EngineRatio(
            row.quantization, round(bare.seconds / row.seconds, 3), [round(value, 3) for value in per_repeat],
            round(statistics.median(start_ups), 3), _differing(outputs[row.command], outputs[bare.command]),
            None if torch_row is None else round(torch_row.seconds / row.seconds, 3),
            None if torch_row is None else _differing(outputs[row.command], outputs[torch_row.command])))
    return EnginesReport(
        **dataclasses.asdict(stamp),
        checkpoint=str(checkpoint), test_set=f"{args.dataset} {args.split}", sentences=sentences,
        search=BenchSearch(search.beam_size, search.length_norm, search.alpha, search.max_len_a, search.max_len_b),
        threads=args.threads, device=args.device, repeats=args.repeats, runs=runs, rows=rows, ratios=ratios,
    )


def _differing(one: str, other: str) -> int:
    """Lines (translations) that differ between two outputs of the same input."""
    return sum(a != b for a, b in zip(one.splitlines(), other.splitlines()))


def render_table(report: EnginesReport) -> str:
    search = report.search
    lines = [
        "# `vaswani translate` on each engine, and a bare CTranslate2 script",
        "",
        f"{report.test_set} ({report.sentences} sentences), beam {search.beam_size}, length penalty "
        f"{search.length_norm} {search.alpha:g}, every engine on {report.device} ({report.threads} CPU "
        "threads); each command "
        f"timed as a process (start-up included), {report.repeats} interleaved repeats, median (min–max).",
        "",
        "| command | sentences/s | spread | start-up s | BLEU |",
        "|---|---:|---|---:|---:|",
    ]
    for row in report.rows:
        lines.append(f"| {row.command} | {row.sentences_per_s:.1f} | {row.sentences_per_s_min:.1f}–"
                     f"{row.sentences_per_s_max:.1f} | {row.start_up_seconds:.2f} | {row.bleu:.2f} |")
    lines.append("")
    for ratio in report.ratios:
        torch = (f"{ratio.over_torch:.2f}× the torch engine's sentences/s ({ratio.lines_unlike_torch} of "
                 f"{report.sentences} translations differ from torch's), " if ratio.over_torch is not None else "")
        spread = ratio.over_bare_per_repeat
        repeats = f" (per repeat {spread[0]:.2f}–{spread[-1]:.2f})" if spread else ""
        lines.append(f"- ctranslate2 {ratio.quantization}: {torch}{ratio.over_bare:.2f}× the bare script's "
                     f"sentences/s on the same converted model{repeats}, "
                     f"{ratio.lines_unlike_bare} translations differ from its.")
    lines += ["", *provenance_lines(report.provenance()), ""]
    return "\n".join(lines)
