"""What `vaswani bench train` writes for a reader: the speed table (``.md`` beside the JSON), the profile
(``.profile.md``) and a line per setting as it is measured."""

from __future__ import annotations

from vaswani.benchmarks.profiling import ceiling_line, kind_table, largest_operators, matmul_lines
from vaswani.benchmarks.train_race import ContenderProfile
from vaswani.provenance import Provenance, provenance_lines


def print_row(row: dict) -> None:
    """One line per setting as it is measured: ours and each other model's tokens/s."""
    ours = row["models"]["vaswani"]["tokens_per_s"]
    others = " | ".join(f"{name} {row['models'][name]['tokens_per_s']:,.0f} (ours {ratio:.2f}x)"
                        for name, ratio in row["ours_over"].items())
    print(f"{row['batches']:>8} {row['loss']:>8} {row['precision']:>4}: vaswani {ours:,.0f} tok/s | {others}",
          flush=True)


_ALLOCATORS = {"reuse": "kept for reuse by every model (`--allocator reuse`, as CPU training does)",
               "system": "returned to the system (`--allocator system`)"}


def profile_markdown(report: dict, profiles: dict[str, list[tuple[str, ContenderProfile]]]) -> str:
    """Each model's training step by operator kind, side by side, with the provenance the numbers need."""
    lines = ["# Where a training step's time goes: torch operators by kind", "",
             f"The first three batches of each setting, {report['profile_passes']} times per model under "
             "`torch.profiler` (forward, backward and the AdamW update): each operator's self CPU time, summed by kind "
             "(its least over the passes), as a share of all operator time.", ""]
    peaks = report.get("matmul_peak_gflops", {})
    for key, group in profiles.items():
        (ours, ours_profile), others = group[0], group[1:]
        threads = ours_profile.threads
        operators = [(name, p.profile) for name, p in group]
        lines += [f"## {key}", "", *kind_table(operators), "",
                  *(largest_operators(name, p) for name, p in operators),
                  *(line for name, p in operators
                    for line in matmul_lines(name, p, peaks.get(str(threads)), threads)),
                  *(ceiling_line(ours, ours_profile.profile, name, p.timed_ms, "time in the timed steps")
                    for name, p in others if p.timed_ms), ""]
    lines += [*provenance_lines(Provenance.from_json(report)), ""]
    return "\n".join(lines)


def _training_setup(report: dict) -> str:
    """How the run batched and stepped, where it did more than the defaults."""
    parts = []
    if report.get("length_buckets"):
        parts.append(f"multi30k batches in {report['length_buckets']} length buckets (fixed shapes)")
    if report.get("deferred_step"):
        parts.append("every model stepped with no host read (train_step's defer_reads)")
    ours = [name for key, name in (("ours_compile", "torch.compile"), ("ours_cuda_graphs", "CUDA graphs"))
            if report.get(key)]
    if ours:
        parts.append(f"ours with {' and '.join(ours)}")
    return f" Setup: {'; '.join(parts)}." if parts else ""


def speed_table(report: dict) -> str:
    """The results as a markdown table, with the provenance the numbers need."""
    m = report["model"]
    lines = [
        "# `vaswani bench train`: training tokens/s, same batches, steps alternated between models",
        "",
        f"Model: d_model {m['d_model']}, {m['n_encoder_layers']}+{m['n_decoder_layers']} layers, {m['n_heads']} "
        f"heads, d_ff {m['d_ff']}, vocabulary {m['vocab_size']}, {m['norm']}-LN, {m['activation']}, "
        f"{m['positions']} positions, dropout {m['dropout']}, attention dropout {m['attention_dropout']}. "
        f"{report['torch_threads']} threads, {report['steps']} timed steps × {report['repeats']} repeats "
        f"after {report['warmup']} warm-up steps; {report['optimizer']}; freed memory "
        f"{_ALLOCATORS[report.get('allocator', 'system')]}. Each repeat alternates single steps of "
        "the models; tokens/s is the median (and range) over repeats, *ours / model* the median over repeats of "
        "the ratio within a repeat." + _training_setup(report),
        "",
        "| batches | loss | precision | model | tokens/s (median) | min–max | ours / model | model TFLOP/s | MFU |",
        "|---|---|---|---|---:|---:|---:|---:|---:|",
    ]
    for row in report["results"]:
        for name, stats in row["models"].items():
            ratio = row["ours_over"].get(name)
            lines.append(f"| {row['batches']} ({row['sentences_per_batch']:.0f} sent., "
                         f"{row['padding']:.0%} pad) | {row['loss']} | {row['precision']} | {name} | "
                         f"{stats['tokens_per_s']:,.0f} | {stats['min']:,.0f}–{stats['max']:,.0f} | "
                         f"{'' if ratio is None else f'{ratio:.2f}×'} | {stats['model_flops_per_s'] / 1e12:.3g} | "
                         f"{stats['mfu']:.1%} |")
    peak_lines = sorted({f"{row['precision']}: {row['peak_flops'] / 1e12:.3g} TFLOP/s ({row['peak_source']})"
                         for row in report["results"]})
    lines += ["", "MFU: the matrix-product FLOPs of forward and backward (3 × forward, embeddings, norms and "
              "softmax not counted) per second, over the peak of " + "; ".join(peak_lines) + "."]
    against_peers = [f"- {row['batches']} batches, {row['loss']} loss, {row['precision']}: {variant} / {peer} "
                     f"**{ratio:.2f}×**"
                     for row in report["results"] for variant, peers in row.get("variants_over_peers", {}).items()
                     for peer, ratio in peers.items()]
    if against_peers:
        lines += ["", "Each variant against each peer (median over repeats of the ratio within a repeat):", "",
                  *against_peers]
    lines += ["", *provenance_lines(Provenance.from_json(report)), ""]
    return "\n".join(lines)


__all__ = ["print_row", "profile_markdown", "speed_table"]
