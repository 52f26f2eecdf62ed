"""What ``vaswani bench decode --peer`` writes and prints (benchmarks/decode_peers.py measures): the table of
sentences/s with the ratios of ours to each engine, the findings read off its numbers, and where the time goes."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vaswani.benchmarks.engines import Stamp
from vaswani.benchmarks.profiling import (
    PROFILE_PASSES,
    OperatorProfile,
    ceiling_line,
    kind_table,
    largest_operators,
    matmul_lines,
)
from vaswani.io import atomic_write_json
from vaswani.provenance import provenance_lines
from vaswani.records import read_record, to_json

OURS, OURS_COMPILED = "ours", "ours, compiled step"


def is_ours(engine: str) -> bool:
    return engine in (OURS, OURS_COMPILED)


@dataclass(frozen=True)
class PeerRow:
    """One engine's timed repeats of one search on ``threads`` threads: a row of table.md."""

    engine: str
    search: str
    threads: int
    sentences: int
    runs: list[float]
    median_s: float
    sentences_per_s: float
    sentences_per_s_min: float
    sentences_per_s_max: float
    tokens: int  # output tokens of the last repeat, </s> included
    bleu: float | None  # None: random weights, no references


@dataclass(frozen=True)
class SpeedRatio:
    """> 1: ours is faster (sentences/s of ``ours`` ÷ the peer's, same search and threads)."""

    ours: str
    engine: str
    search: str
    threads: int
    ours_over_peer: float


@dataclass(frozen=True)
class ThreadScaling:
    engine: str
    search: str
    threads: int
    over_one_thread: float  # sentences/s at ``threads`` threads ÷ at 1 thread


@dataclass
class Workload:
    engine: str
    search: str
    threads: int


@dataclass
class EngineProfile(OperatorProfile, Workload):
    """One torch engine's untimed passes of one search at ``threads`` threads, by operator kind: a flat object of
    results.json, the workload's fields first (a dataclass lays out its bases' fields from the last base)."""


@dataclass(frozen=True)
class TrainingRecord:
    """How a checkpoint was trained: its run's first provenance record and summary.json, kept as the JSON they
    are, since a results file outlives the dataclasses of the code that wrote those."""

    provenance: dict[str, Any] | None
    summary: dict[str, Any] | None = None  # None, and absent from the JSON, when the run has no summary.json


@dataclass(frozen=True)
class TrainedModel:
    checkpoint: str
    parameters: int
    config: dict[str, Any]
    test_set: str
    training: TrainingRecord | None  # None: the checkpoint is not in a run directory with a provenance record


@dataclass(frozen=True)
class RandomModel:
    random_weights: bool
    config: dict[str, Any]


@dataclass(frozen=True)
class PeerThreads:
    counts: list[int]  # every engine ran at each count
    ctranslate2_inter: int


@dataclass(frozen=True)
class PeersReport(Stamp):
    """results.json of `vaswani bench decode --peer`."""

    setting: str
    model: RandomModel | TrainedModel
    threads: PeerThreads
    sentences: int
    batch_size: int
    repeats: int
    output_len: int | str  # str: the rule a trained checkpoint's limits follow
    results: list[PeerRow]
    speed_ratios: list[SpeedRatio]
    thread_scaling: list[ThreadScaling]
    profile: list[EngineProfile]  # empty without --profile
    matmul_peak_gflops: dict[str, float]  # per thread count, with --profile
    profile_passes: int = PROFILE_PASSES  # a file without it ran the default

    @classmethod
    def read(cls, path: str | Path) -> PeersReport:
        return read_record(cls, path)

    def write(self, path: Path) -> None:
        """Write results.json, without the summary a run did not write."""
        value = to_json(self)
        if value["model"].get("training") and value["model"]["training"]["summary"] is None:
            del value["model"]["training"]["summary"]
        atomic_write_json(path, value)


def render_table(report: PeersReport) -> str:
    counts = report.threads.counts
    own = list(dict.fromkeys(r.ours for r in report.speed_ratios)) or [OURS]
    ratio_header = "ours ÷ engine" if own == [OURS] else f"ours ÷ engine ({' / '.join(own)})"
    lines = [
        "# Decoding speed: ours vs MarianMT `generate` vs CTranslate2",
        "",
        f"Setting: {report.setting}; {report.sentences} sentences in batches of {report.batch_size}; "
        f"{report.repeats} interleaved repeats, median (min–max) sentences/s; every engine on "
        f"{' and on '.join(str(n) for n in counts)} thread{'s' if counts != [1] else ''}.",
        "",
        f"| engine | search | threads | sentences/s | spread | output tokens | BLEU | {ratio_header} |",
        "|---|---|---:|---:|---|---:|---:|---:|",
    ]
    ratios: dict[tuple[str, str, int], list[str]] = {}
    for r in report.speed_ratios:
        ratios.setdefault((r.engine, r.search, r.threads), []).append(f"{r.ours_over_peer:.2f}×")
    for row in report.results:
        ratio = " / ".join(ratios.get((row.engine, row.search, row.threads), ["–"]))
        lines.append(
            f"| {row.engine} | {row.search} | {row.threads} | {row.sentences_per_s:.1f} | "
            f"{row.sentences_per_s_min:.1f}–{row.sentences_per_s_max:.1f} | {row.tokens} | "
            f"{'–' if row.bleu is None else row.bleu} | {ratio} |"
        )
    lines += ["", *findings(report)]
    lines += ["", *footer(report)]
    return "\n".join(lines)


def findings(report: PeersReport) -> list[str]:
    """Sentences stating what the numbers say (written from them, never typed by hand)."""
    rows = {(r.engine, r.search, r.threads): r for r in report.results}
    out = []
    for r in report.speed_ratios:
        verdict = "faster" if r.ours_over_peer > 1 else "slower"
        out.append(f"- {r.search}, {r.threads} thread{'s' if r.threads > 1 else ''}: {r.ours} runs at "
                   f"{r.ours_over_peer:.2f}× the sentences/s of {r.engine} ({verdict}).")
    for (engine, search, threads), row in rows.items():
        eager = rows.get((OURS, search, threads))
        if engine == OURS_COMPILED and eager:
            same = "the same" if row.bleu == eager.bleu and row.tokens == eager.tokens else "different"
            out.append(f"- {search}, {threads} thread{'s' if threads > 1 else ''}: our compiled decoding step runs "
                       f"at {eager.median_s / row.median_s:.2f}× the sentences/s of our eager one, with "
                       f"{same} outputs ({row.tokens} vs {eager.tokens} tokens).")
    for r in report.thread_scaling:
        out.append(f"- {r.engine}, {r.search}: {r.threads} threads give {r.over_one_thread:.2f}× "
                   "its sentences/s on 1 thread.")
    for search, threads in sorted({(s, n) for _, s, n in rows}):
        if threads != min(n for *_, n in rows):  # outputs do not depend on threads: state them once
            continue
        fp32, int8 = rows.get(("ctranslate2 float32", search, threads)), rows.get(("ctranslate2 int8", search, threads))
        if fp32 and int8 and fp32.bleu is not None and int8.bleu is not None:
            out.append(f"- {search}: CTranslate2 int8 BLEU {int8.bleu} vs float32 {fp32.bleu} "
                       f"(difference {int8.bleu - fp32.bleu:+.2f}).")
        ours, marian = rows.get(("ours", search, threads)), rows.get(("marian", search, threads))
        if ours and marian and ours.bleu is not None:
            same = "the same" if ours.bleu == marian.bleu and ours.tokens == marian.tokens else "different"
            out.append(f"- {search}: MarianMT generate and ours give {same} outputs by BLEU and length "
                       f"({marian.bleu} vs {ours.bleu}).")
    return out


def render_profile(report: PeersReport) -> str:
    medians = {(r.engine, r.search, r.threads): r.median_s * 1e3 for r in report.results}
    lines = ["# Where decoding time goes: torch operators by kind", "",
             f"{report.profile_passes} more passes over the same batches per torch engine under `torch.profiler`: "
             "each operator's self CPU time, summed by kind (its least over the passes), as a share of all operator "
             "time. The profiler slows a pass (the fastest one's wall clock is given beside the unprofiled median of "
             "the timed repeats); long operators such as the matrix products are measured almost unchanged. "
             "CTranslate2 runs compiled code the profiler cannot see into: only its unprofiled total is known.", ""]
    for search, threads in dict.fromkeys((p.search, p.threads) for p in report.profile):
        group = [p for p in report.profile if p.search == search and p.threads == threads]
        lines += [f"## {search}, {threads} thread{'s' if threads > 1 else ''}", "",
                  *kind_table([(p.engine, p) for p in group]),
                  "| unprofiled pass (median) | "
                  + " | ".join(f"{medians[p.engine, search, threads]:.0f} | " for p in group) + " |", ""]
        lines += [largest_operators(p.engine, p) for p in group]
        peak = report.matmul_peak_gflops.get(str(threads))
        lines += [line for p in group for line in matmul_lines(p.engine, p, peak, threads)]
        ours = next((p for p in group if p.engine == OURS), None)
        if ours is not None:  # every other engine, CTranslate2 included (the profiler cannot see into it)
            lines += [ceiling_line(OURS, ours, engine, medians[engine, search, threads], "unprofiled median")
                      for engine, s, t in medians if (s, t) == (search, threads) and not is_ours(engine)]
        lines.append("")
    lines += footer(report)
    return "\n".join(lines)


def footer(report: PeersReport) -> list[str]:
    command, commit, hardware = provenance_lines(report.provenance())
    return [command, commit, f"{hardware}  ", f"Model: {model_line(report.model)}", ""]


def model_line(info: RandomModel | TrainedModel) -> str:
    c = info.config
    shape = (f"d_model {c['d_model']}, {c['n_encoder_layers']}+{c['n_decoder_layers']} layers, {c['n_heads']} heads, "
             f"d_ff {c['d_ff']}, vocabulary {c['vocab_size']}, {c['norm']}-LN, {c['positions']} positions, "
             f"{c['attention']} attention")
    if isinstance(info, RandomModel):
        return f"random weights, {shape}"
    line = f"{info.checkpoint} ({info.parameters:,} parameters; {shape}); {info.test_set}"
    if info.training and info.training.provenance:
        started, summary = info.training.provenance, info.training.summary or {}
        line += (f"  \nTrained by: `{started['command']}` at commit {started['git'].get('commit')} "
                 f"({summary.get('step')} updates, {summary.get('minutes')} minutes, "
                 f"stopped by {summary.get('stop_reason')})")
    return line


def print_report(report: PeersReport) -> None:
    print(f"{'engine':<22} {'search':<8} {'thr':>3} {'sent/s':>8} {'spread':>15} {'tokens':>7} {'BLEU':>6}")
    for row in report.results:
        spread = f"{row.sentences_per_s_min:.1f}-{row.sentences_per_s_max:.1f}"
        bleu = "-" if row.bleu is None else f"{row.bleu:.2f}"
        print(f"{row.engine:<22} {row.search:<8} {row.threads:>3} {row.sentences_per_s:>8.1f} "
              f"{spread:>15} {row.tokens:>7} {bleu:>6}")
    for line in findings(report):
        print(line)
