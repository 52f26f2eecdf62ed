"""What `vaswani bench train` writes: the JSON (:class:`TrainReport`), the speed table (``.md`` beside it), the
profile (``.profile.md``), and for a reader a line per setting as it is measured."""

from __future__ import annotations

from dataclasses import dataclass

from vaswani.benchmarks.engines import Stamp
from vaswani.benchmarks.profiling import ceiling_line, kind_table, largest_operators, matmul_lines
from vaswani.benchmarks.train_race import OURS, ContenderProfile, ResultRow
from vaswani.config import ModelConfig
from vaswani.provenance import provenance_lines


@dataclass(frozen=True, kw_only=True)
class TrainReport(Stamp):
    """The JSON written to ``--out``: provenance, what was measured, and the results. A field with a default may be
    missing from a results file an older vaswani wrote."""

    preset: str
    settings: list[str]  # the --set overrides
    model: ModelConfig
    variants: dict[str, ModelConfig]
    torch_threads: int
    max_tokens: int
    steps: int
    warmup: int
    repeats: int
    length_buckets: int | None = None
    ours_compile: bool = False
    ours_cuda_graphs: bool = False
    deferred_step: bool = False
    optimizer: str
    allocator: str = "system"
    results: list[ResultRow]
    profile: dict[str, dict[str, ContenderProfile]]  # by setting, then model (ours first)
    # The rate the profiled matrix products are compared with, measured in this run (see matmul_peak).
    matmul_peak_gflops: dict[str, float]
    profile_passes: int


def print_row(row: ResultRow) -> None:
    """One line per setting as it is measured: ours and each other model's tokens/s."""
    others = " | ".join(f"{name} {row.models[name].tokens_per_s:,.0f} (ours {ratio:.2f}x)"
                        for name, ratio in row.ours_over.items())
    print(f"{row.batches:>8} {row.loss:>8} {row.precision:>4}: vaswani {row.models[OURS].tokens_per_s:,.0f} tok/s "
          f"| {others}", flush=True)


_ALLOCATORS = {"reuse": "kept for reuse by every model (`--allocator reuse`, as CPU training does)",
               "system": "returned to the system (`--allocator system`)"}


def profile_markdown(report: TrainReport) -> str:
    """Each model's training step by operator kind, side by side, with the provenance the numbers need."""
    lines = ["# Where a training step's time goes: torch operators by kind", "",
             f"The first three batches of each setting, {report.profile_passes} times per model under "
             "`torch.profiler` (forward, backward and the AdamW update): each operator's self CPU time, summed by kind "
             "(its least over the passes), as a share of all operator time.", ""]
    for key, group in report.profile.items():
        operators = list(group.items())
        (ours, ours_profile), others = operators[0], operators[1:]
        threads = ours_profile.threads
        lines += [f"## {key}", "", *kind_table(operators), "",
                  *(largest_operators(name, p) for name, p in operators),
                  *(line for name, p in operators
                    for line in matmul_lines(name, p, report.matmul_peak_gflops.get(str(threads)), threads)),
                  *(ceiling_line(ours, ours_profile, name, p.timed_ms, "time in the timed steps")
                    for name, p in others if p.timed_ms), ""]
    lines += [*provenance_lines(report.provenance()), ""]
    return "\n".join(lines)


def _training_setup(report: TrainReport) -> str:
    """How the run batched and stepped, where it did more than the defaults."""
    parts = []
    if report.length_buckets:
        parts.append(f"multi30k batches in {report.length_buckets} length buckets (fixed shapes)")
    if report.deferred_step:
        parts.append("every model stepped with no host read (train_step's defer_reads)")
    ours = [name for on, name in ((report.ours_compile, "torch.compile"), (report.ours_cuda_graphs, "CUDA graphs"))
            if on]
    if ours:
        parts.append(f"ours with {' and '.join(ours)}")
    return f" Setup: {'; '.join(parts)}." if parts else ""


def speed_table(report: TrainReport) -> str:
    """The results as a markdown table, with the provenance the numbers need."""
    m = report.model
    lines = [
        "# `vaswani bench train`: training tokens/s, same batches, steps alternated between models",
        "",
        f"Model: d_model {m.d_model}, {m.n_encoder_layers}+{m.n_decoder_layers} layers, {m.n_heads} "
        f"heads, d_ff {m.d_ff}, vocabulary {m.vocab_size}, {m.norm}-LN, {m.activation}, "
        f"{m.positions} positions, dropout {m.dropout}, attention dropout {m.attention_dropout}. "
        f"{report.torch_threads} threads, {report.steps} timed steps × {report.repeats} repeats "
        f"after {report.warmup} warm-up steps; {report.optimizer}; freed memory "
        f"{_ALLOCATORS[report.allocator]}. Each repeat alternates single steps of "
        "the models; tokens/s is the median (and range) over repeats, *ours / model* the median over repeats of "
        "the ratio within a repeat." + _training_setup(report),
        "",
        "| batches | loss | precision | model | tokens/s (median) | min–max | ours / model | model TFLOP/s | MFU |",
        "|---|---|---|---|---:|---:|---:|---:|---:|",
    ]
    for row in report.results:
        for name, speed in row.models.items():
            ratio = row.ours_over.get(name)
            lines.append(f"| {row.batches} ({row.sentences_per_batch:.0f} sent., "
                         f"{row.padding:.0%} pad) | {row.loss} | {row.precision} | {name} | "
                         f"{speed.tokens_per_s:,.0f} | {speed.min:,.0f}–{speed.max:,.0f} | "
                         f"{'' if ratio is None else f'{ratio:.2f}×'} | {speed.model_flops_per_s / 1e12:.3g} | "
                         f"{speed.mfu:.1%} |")
    peak_lines = sorted({f"{row.precision}: {row.peak_flops / 1e12:.3g} TFLOP/s ({row.peak_source})"
                         for row in report.results})
    lines += ["", "MFU: the matrix-product FLOPs of forward and backward (3 × forward, embeddings, norms and "
              "softmax not counted) per second, over the peak of " + "; ".join(peak_lines) + "."]
    against_peers = [f"- {row.batches} batches, {row.loss} loss, {row.precision}: {variant} / {peer} "
                     f"**{ratio:.2f}×**"
                     for row in report.results for variant, peers in row.variants_over_peers.items()
                     for peer, ratio in peers.items()]
    if against_peers:
        lines += ["", "Each variant against each peer (median over repeats of the ratio within a repeat):", "",
                  *against_peers]
    lines += ["", *provenance_lines(report.provenance()), ""]
    return "\n".join(lines)


__all__ = ["TrainReport", "print_row", "profile_markdown", "speed_table"]
