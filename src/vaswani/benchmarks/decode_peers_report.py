"""What ``vaswani bench decode --peer`` writes and prints (benchmarks/decode_peers.py measures): the table of
sentences/s with the ratios of ours to each engine, the findings read off its numbers, and where the time goes."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from vaswani.benchmarks.profiling import (
    OperatorProfile,
    ceiling_line,
    kind_table,
    largest_operators,
    matmul_lines,
)
from vaswani.provenance import provenance_lines

OURS, OURS_COMPILED = "ours", "ours, compiled step"


def is_ours(engine: str) -> bool:
    return engine in (OURS, OURS_COMPILED)


def render_table(report: dict[str, Any]) -> str:
    counts = report["threads"]["counts"]
    own = list(dict.fromkeys(r["ours"] for r in report["speed_ratios"])) or [OURS]
    ratio_header = "ours ÷ engine" if own == [OURS] else f"ours ÷ engine ({' / '.join(own)})"
    lines = [
        "# Decoding speed: ours vs MarianMT `generate` vs CTranslate2",
        "",
        f"Setting: {report['setting']}; {report['sentences']} sentences in batches of {report['batch_size']}; "
        f"{report['repeats']} interleaved repeats, median (min–max) sentences/s; every engine on "
        f"{' and on '.join(str(n) for n in counts)} thread{'s' if counts != [1] else ''}.",
        "",
        f"| engine | search | threads | sentences/s | spread | output tokens | BLEU | {ratio_header} |",
        "|---|---|---:|---:|---|---:|---:|---:|",
    ]
    ratios: dict[tuple[str, str, int], list[str]] = {}
    for r in report["speed_ratios"]:
        ratios.setdefault((r["engine"], r["search"], r["threads"]), []).append(f"{r['ours_over_peer']:.2f}×")
    for row in report["results"]:
        ratio = " / ".join(ratios.get((row["engine"], row["search"], row["threads"]), ["–"]))
        lines.append(
            f"| {row['engine']} | {row['search']} | {row['threads']} | {row['sentences_per_s']:.1f} | "
            f"{row['sentences_per_s_min']:.1f}–{row['sentences_per_s_max']:.1f} | {row['tokens']} | "
            f"{'–' if row['bleu'] is None else row['bleu']} | {ratio} |"
        )
    lines += ["", *findings(report)]
    lines += ["", *footer(report)]
    return "\n".join(lines)


def findings(report: dict[str, Any]) -> list[str]:
    """Sentences stating what the numbers say (written from them, never typed by hand)."""
    rows = {(r["engine"], r["search"], r["threads"]): r for r in report["results"]}
    out = []
    for r in report["speed_ratios"]:
        verdict = "faster" if r["ours_over_peer"] > 1 else "slower"
        out.append(f"- {r['search']}, {r['threads']} thread{'s' if r['threads'] > 1 else ''}: {r['ours']} runs at "
                   f"{r['ours_over_peer']:.2f}× the sentences/s of {r['engine']} ({verdict}).")
    for (engine, search, threads), row in rows.items():
        eager = rows.get((OURS, search, threads))
        if engine == OURS_COMPILED and eager:
            same = "the same" if row["bleu"] == eager["bleu"] and row["tokens"] == eager["tokens"] else "different"
            out.append(f"- {search}, {threads} thread{'s' if threads > 1 else ''}: our compiled decoding step runs "
                       f"at {eager['median_s'] / row['median_s']:.2f}× the sentences/s of our eager one, with "
                       f"{same} outputs ({row['tokens']} vs {eager['tokens']} tokens).")
    for r in report["thread_scaling"]:
        out.append(f"- {r['engine']}, {r['search']}: {r['threads']} threads give {r['over_one_thread']:.2f}× "
                   "its sentences/s on 1 thread.")
    for search, threads in sorted({(s, n) for _, s, n in rows}):
        if threads != min(n for *_, n in rows):  # outputs do not depend on threads: state them once
            continue
        fp32, int8 = rows.get(("ctranslate2 float32", search, threads)), rows.get(("ctranslate2 int8", search, threads))
        if fp32 and int8 and fp32["bleu"] is not None:
            out.append(f"- {search}: CTranslate2 int8 BLEU {int8['bleu']} vs float32 {fp32['bleu']} "
                       f"(difference {int8['bleu'] - fp32['bleu']:+.2f}).")
        ours, marian = rows.get(("ours", search, threads)), rows.get(("marian", search, threads))
        if ours and marian and ours["bleu"] is not None:
            same = "the same" if ours["bleu"] == marian["bleu"] and ours["tokens"] == marian["tokens"] else "different"
            out.append(f"- {search}: MarianMT generate and ours give {same} outputs by BLEU and length "
                       f"({marian['bleu']} vs {ours['bleu']}).")
    return out


@dataclass
class EngineProfile:
    """One torch engine's untimed passes of one search at ``threads`` threads, by operator kind."""

    engine: str
    search: str
    threads: int
    profile: OperatorProfile


def render_profile(report: dict[str, Any], profiles: list[EngineProfile]) -> str:
    medians = {(r["engine"], r["search"], r["threads"]): r["median_s"] * 1e3 for r in report["results"]}
    lines = ["# Where decoding time goes: torch operators by kind", "",
             f"{report['profile_passes']} more passes over the same batches per torch engine under `torch.profiler`: "
             "each operator's self CPU time, summed by kind (its least over the passes), as a share of all operator "
             "time. The profiler slows a pass (the fastest one's wall clock is given beside the unprofiled median of "
             "the timed repeats); long operators such as the matrix products are measured almost unchanged. "
             "CTranslate2 runs compiled code the profiler cannot see into: only its unprofiled total is known.", ""]
    for search, threads in dict.fromkeys((p.search, p.threads) for p in profiles):
        group = [p for p in profiles if p.search == search and p.threads == threads]
        lines += [f"## {search}, {threads} thread{'s' if threads > 1 else ''}", "",
                  *kind_table([(p.engine, p.profile) for p in group]),
                  "| unprofiled pass (median) | "
                  + " | ".join(f"{medians[p.engine, search, threads]:.0f} | " for p in group) + " |", ""]
        lines += [largest_operators(p.engine, p.profile) for p in group]
        peak = report.get("matmul_peak_gflops", {}).get(str(threads))
        lines += [line for p in group for line in matmul_lines(p.engine, p.profile, peak, threads)]
        ours = next((p.profile for p in group if p.engine == OURS), None)
        if ours is not None:  # every other engine, CTranslate2 included (the profiler cannot see into it)
            lines += [ceiling_line(OURS, ours, engine, medians[engine, search, threads], "unprofiled median")
                      for engine, s, t in medians if (s, t) == (search, threads) and not is_ours(engine)]
        lines.append("")
    lines += footer(report)
    return "\n".join(lines)


def footer(report: dict[str, Any]) -> list[str]:
    command, commit, hardware = provenance_lines(report)
    return [command, commit, f"{hardware}  ", f"Model: {model_line(report['model'])}", ""]


def model_line(info: dict[str, Any]) -> str:
    c = info["config"]
    shape = (f"d_model {c['d_model']}, {c['n_encoder_layers']}+{c['n_decoder_layers']} layers, {c['n_heads']} heads, "
             f"d_ff {c['d_ff']}, vocabulary {c['vocab_size']}, {c['norm']}-LN, {c['positions']} positions, "
             f"{c['attention']} attention")
    if info.get("random_weights"):
        return f"random weights, {shape}"
    line = f"{info['checkpoint']} ({info['parameters']:,} parameters; {shape}); {info['test_set']}"
    training = info.get("training") or {}
    if training.get("provenance"):
        summary = training.get("summary") or {}
        line += (f"  \nTrained by: `{training['provenance']['command']}` at commit "
                 f"{training['provenance']['git'].get('commit')} ({summary.get('step')} updates, "
                 f"{summary.get('minutes')} minutes, stopped by {summary.get('stop_reason')})")
    return line


def print_report(report: dict[str, Any]) -> None:
    print(f"{'engine':<22} {'search':<8} {'thr':>3} {'sent/s':>8} {'spread':>15} {'tokens':>7} {'BLEU':>6}")
    for row in report["results"]:
        spread = f"{row['sentences_per_s_min']:.1f}-{row['sentences_per_s_max']:.1f}"
        bleu = "-" if row["bleu"] is None else f"{row['bleu']:.2f}"
        print(f"{row['engine']:<22} {row['search']:<8} {row['threads']:>3} {row['sentences_per_s']:>8.1f} "
              f"{spread:>15} {row['tokens']:>7} {bleu:>6}")
    for line in findings(report):
        print(line)
