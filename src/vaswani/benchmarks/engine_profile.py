"""Where `vaswani translate` on CTranslate2 spends what the bare script does not: cProfile of the command, run as a
user runs it, once on an empty input (the start-up) and once on the test set (the translation).

cProfile slows Python code by a roughly constant factor and native code not at all, so its figures are shares of
a profiled run, not timings; the timings are ``bench engines``' own (table.md).
"""

from __future__ import annotations

import pstats
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from vaswani.errors import VaswaniError
from vaswani.provenance import provenance_lines

if TYPE_CHECKING:
    from vaswani.benchmarks.engines import EnginesReport

# The start-up's phases: (what, how the profile names the function whose cumulative time it is). Nested phases
# follow their parent; the rest of the profiled time is Python's own start, argument parsing and small files.
STARTUP_PHASES = [
    ("the command line (vaswani.cli and its parser)", ("vaswani/cli.py", "build_parser")),
    ("the search settings and engine choice (search.json)",
     ("vaswani/decoding/commands.py", "search_config_from_args")),
    ("the tokenizer (tokenizer.json)", ("vaswani/data/tokenizer.py", "load")),
    ("the CTranslate2 engine", ("vaswani/decoding/ct2_engine.py", "load")),
    ("  importing ctranslate2 (the bare script too)", ("ctranslate2/__init__.py", "<module>")),
    ("  the record of the last full check (ct2_checked.py: the files' identities)",
     ("vaswani/decoding/ct2_checked.py", "checked_conversion")),
    ("  the checkpoint's check (sha256 against its manifest; skipped when the record matches)",
     ("vaswani/model/serialization.py", "check_checkpoint")),
    ("  the conversion's key (sha256 of the checkpoint's files; skipped when the record matches)",
     ("vaswani/decoding/ct2_model.py", "checkpoint_key")),
    ("  loading model.bin (the bare script too)", ("vaswani/decoding/ct2_engine.py", "__init__")),
    ("  the vocabulary (the conversion's shared_vocabulary.json)", ("vaswani/decoding/ct2_engine.py",
                                                                     "stored_vocabulary")),
]
# ctranslate2's methods are pybind11 functions, which cProfile does not record as calls of their own: their time is
# the own time of the engine's method that calls them (with that method's own lines, a loop over the results).
TRANSLATION_PHASES = [
    ("CTranslate2's search (translate_batch, in CTranslate2Engine.search's own time)",
     ("vaswani/decoding/ct2_engine.py", "search")),
    ("CTranslate2's rescoring of outputs cut at their limit (score_batch, in CTranslate2Engine._rescored's own "
     "time)", ("vaswani/decoding/ct2_engine.py", "_rescored")),
    ("encoding the sources (tokenizers)", ("vaswani/data/tokenizer.py", "encode_batch")),
    ("decoding the outputs (tokenizers)", ("vaswani/data/tokenizer.py", "decode_batch")),
]


@dataclass(frozen=True)
class Phase:
    """A phase of a profiled run: a function's cumulative (or own) time and calls."""

    what: str
    seconds: float  # cumulative, profiled
    share: float  # of the profiled total
    calls: int


@dataclass(frozen=True)
class EngineProfile:
    """Where `vaswani translate` on CTranslate2 spends its time: the "profile" of results.json and profile.md."""

    quantization: str
    startup_seconds: float  # profiled, from the interpreter's first vaswani import to exit
    startup: list[Phase]
    translation_seconds: float  # profiled: Translator.translate_nbest, whole
    translation: list[Phase]
    batches: int  # translate_batch calls
    python_per_batch_ms: float  # profiled: what translate_nbest spends outside CTranslate2's calls, per batch
    startup_top: list[str]  # the functions of the start-up with the most cumulative time


def profile_translate(command: Callable[[Path, Path], list[str]], work: Path, env: dict[str, str],
                      quantization: str) -> EngineProfile:
    """Profile ``command`` (input, output -> argv of `python -m vaswani translate …`) on ``work``'s empty.txt and
    source.txt."""
    startup = _profiled(command(work / "empty.txt", work / "profile-empty.txt"), work / "startup.prof", env)
    translation = _profiled(command(work / "source.txt", work / "profile-out.txt"), work / "translate.prof", env)
    startup_total = _total(startup)
    whole = _cumulative(translation, ("vaswani/decoding/translator.py", "translate_nbest"))
    phases = [_phase(translation, what, where, whole, own=where[0].endswith("ct2_engine.py"))
              for what, where in TRANSLATION_PHASES]
    native = sum(phase.seconds for phase in phases[:2])
    batches = phases[0].calls
    # The Python around the search: translate_nbest's time outside CTranslate2's calls (tokenizers included, as the
    # bare script pays for them too, once).
    python_per_batch = 1000 * (whole[0] - native) / max(batches, 1)
    return EngineProfile(quantization, round(startup_total, 4),
                         [_phase(startup, what, where, (startup_total, 1)) for what, where in STARTUP_PHASES],
                         round(whole[0], 4), phases, batches, round(python_per_batch, 3), _top(startup, 25))


def _profiled(argv: list[str], out: Path, env: dict[str, str]) -> pstats.Stats:
    profiled = [argv[0], "-m", "cProfile", "-o", str(out), *argv[1:]]
    done = subprocess.run(profiled, capture_output=True, text=True, env=env)
    if done.returncode != 0:
        lines = [line for line in done.stderr.splitlines() if line.strip()]
        raise VaswaniError(f"profiling `{' '.join(argv[1:4])} …` failed: {lines[-1] if lines else done.returncode}")
    return pstats.Stats(str(out))


def _total(stats: pstats.Stats) -> float:
    return float(stats.total_tt)  # type: ignore[attr-defined]


def _matches(key: tuple[str, int, str], where: tuple[str, str]) -> bool:
    path, _, name = key
    return name == where[1] and (where[0] == "~" or path.replace("\\", "/").endswith(where[0]))


def _cumulative(stats: pstats.Stats, where: tuple[str, str], own: bool = False) -> tuple[float, int]:
    """(cumulative seconds, calls) of the function ``where`` names (summed if several match); ``own``: its own
    seconds, without the functions it calls."""
    seconds, calls = 0.0, 0
    for key, (_, primitive_calls, own_seconds, cumulative, _) in stats.stats.items():  # type: ignore[attr-defined]
        if _matches(key, where):
            seconds, calls = seconds + (own_seconds if own else cumulative), calls + primitive_calls
    return seconds, calls


def _phase(stats: pstats.Stats, what: str, where: tuple[str, str], total: tuple[float, int],
           own: bool = False) -> Phase:
    seconds, calls = _cumulative(stats, where, own)
    return Phase(what, round(seconds, 4), round(seconds / total[0], 4) if total[0] else 0.0, calls)


def _top(stats: pstats.Stats, count: int) -> list[str]:
    """The ``count`` functions with the most cumulative time, outside the import machinery and the entry point."""
    rows = []
    for (path, line, name), (_, calls, own, cumulative, _) in stats.stats.items():  # type: ignore[attr-defined]
        if path.startswith("<frozen") or name in ("<module>", "exec") and "vaswani" not in path:
            continue
        where = path.split("site-packages/")[-1].split("/src/")[-1]
        rows.append((cumulative, f"{cumulative:.4f} s cumulative, {own:.4f} s own, {calls} calls: {where}:{line} "
                                 f"{name}"))
    rows.sort(reverse=True)
    return [text for _, text in rows[:count]]


def render_profile(profile: EngineProfile, report: EnginesReport) -> str:
    lines = [
        f"# Where `vaswani translate` on CTranslate2 {profile.quantization} spends its time",
        "",
        "cProfile of the command as a user runs it (bytecode cache on), on the machine and commit below. cProfile "
        "slows Python code, not native code, so these are shares of a profiled run; the timings are in "
        "[table.md](table.md).",
        "",
        f"## Start-up (an empty input): {profile.startup_seconds:.3f} s profiled",
        "",
        "| phase | seconds | share |",
        "|---|---:|---:|",
        *(f"| {phase.what} | {phase.seconds:.4f} | {100 * phase.share:.1f} % |" for phase in profile.startup),
        "",
        f"## Translation ({report.sentences} sentences): {profile.translation_seconds:.3f} s profiled in "
        f"`Translator.translate_nbest`, {profile.batches} batches",
        "",
        "| part | seconds | share | calls |",
        "|---|---:|---:|---:|",
        *(f"| {phase.what} | {phase.seconds:.4f} | {100 * phase.share:.1f} % | {phase.calls} |"
          for phase in profile.translation),
        "",
        f"The Python around the search (batching, ids to CTranslate2's tokens and back, n-best lists, encoding and "
        f"decoding): {profile.python_per_batch_ms:.2f} ms per batch, profiled.",
        "",
        "## The start-up's functions with the most cumulative time",
        "",
        *(f"- {line}" for line in profile.startup_top),
        "",
        *provenance_lines(report.provenance()),
        "",
    ]
    return "\n".join(lines)
