"""Writing down `vaswani experiment attention`: the tables (table.md), what the numbers say (README.md), the plots
and the summary printed at the end. Nothing here measures; every number comes from ``measure``'s results."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from vaswani.config import ModelConfig
from vaswani.experiments.attention.measure import layer_training_flops
from vaswani.experiments.attention.results import AttentionResults, LayerPoint, ModelStep
from vaswani.experiments.attention.settings import VARIANTS, AttentionSettings
from vaswani.experiments.measurement import MiB
from vaswani.experiments.reporting import markdown_table, provenance_line, pyplot


def _ok(point: LayerPoint | ModelStep | None) -> bool:
    return point is not None and point.ok


def table(settings: AttentionSettings, results: AttentionResults, device: torch.device, command: str) -> str:
    points = results.microbenchmark
    kind = "causal (decoder) self-attention" if settings.causal else "bidirectional (encoder) self-attention"
    lines = [
        f"# Attention backends: time, memory, FLOPs ({settings.d_model} wide, {settings.n_heads} heads)",
        "",
        provenance_line(device, command),
        "",
        f"One `MultiHeadAttention` layer, {kind}, {results.precision}, dropout {settings.dropout}, forward + "
        f"backward; window k = {settings.window}. Time: median of up to {settings.repeats} synchronised runs after "
        f"{settings.warmup} warm-up. Memory: {_memory_label(device)} — peak above the inputs and weights. "
        "FLOPs: training FLOPs (3 × forward matmuls) of the projections and of the scores the masks allow "
        "(`vaswani.training.flops`, the count MFU uses), without and with the window. The window runs in blocks "
        f"of queries over the keys it reaches (`model.window.windowed_attention`): about T·2k scores, not T².",
        "",
    ]
    for batch in settings.batch_sizes:
        lines += [f"## Batch size {batch}", "", _micro_table(points, settings, batch), ""]
    skipped = sorted({p.status for p in points if not p.ok})
    if skipped:
        lines += ["Not measured (–): " + "; ".join(skipped) + ".", ""]
    lines += _window_lines(results.window_sweep, settings)
    lines += _agreement_lines(results, settings)
    lines += _model_lines(results.model_step, settings, device)
    if results.training:
        lines += _training_lines(results, settings)
    lines += ["## How memory was measured", "", results.memory_method + ".",
              "The analytic size of one fp32 B·H·T² score matrix is given beside it: the standard backend keeps "
              "about three of them for backward (softmax output, and with dropout its mask and the dropped copy).",
              ""]
    return "\n".join(lines)


def _memory_label(device: torch.device) -> str:
    if device.type == "cuda":
        return "`torch.cuda.max_memory_allocated`"
    return "CPU allocations replayed from torch.profiler"


def _point(points: list[LayerPoint], name: str, batch: int, length: int, window: int | None = None,
           by_backend: bool = False) -> LayerPoint | None:
    return next((p for p in points if (p.backend if by_backend else p.variant) == name
                 and p.batch_size == batch and p.length == length
                 and (not by_backend or p.window == window)), None)


def _micro_table(points: list[LayerPoint], settings: AttentionSettings, batch: int) -> str:
    headers = ["T", "GFLOP", f"GFLOP (window {settings.window})", "B·H·T² fp32 (MiB)"]
    for chosen in VARIANTS:
        headers += [f"{chosen.name} ms", f"{chosen.name} MiB"]
    rows = []
    for length in settings.lengths:
        row: list[Any] = [length, layer_training_flops(settings, batch, length) / 1e9,
                          layer_training_flops(settings, batch, length, settings.window) / 1e9,
                          batch * settings.n_heads * length**2 * 4 / MiB]
        for chosen in VARIANTS:
            point = _point(points, chosen.name, batch, length)
            row += [1000 * point.seconds if _ok(point) else None,
                    point.extra_memory / MiB if _ok(point) else None]
        rows.append(row)
    return markdown_table(headers, rows)


def _window_lines(sweep: list[LayerPoint], settings: AttentionSettings) -> list[str]:
    batch, length = settings.batch_sizes[0], settings.window_length
    rows = []
    for window in [*sorted(settings.windows), None]:
        row: list[Any] = ["none (full)" if window is None else window,
                          layer_training_flops(settings, batch, length, window) / 1e9]
        for backend in ("standard", "sdpa"):
            point = _point(sweep, backend, batch, length, window, by_backend=True)
            row += [1000 * point.seconds if _ok(point) else None,
                    point.extra_memory / MiB if _ok(point) else None]
        rows.append(row)
    return [f"## Memory against the window k (T = {length}, batch {batch})", "",
            "The same layer at one length with each window: the scores kept for backward grow with T·k, so "
            "memory falls with k; without a window they grow with T².", "",
            markdown_table(["k", "GFLOP", "standard ms", "standard MiB", "sdpa ms", "sdpa MiB"], rows), ""]


def _agreement_lines(results: AttentionResults, settings: AttentionSettings) -> list[str]:
    check = results.flop_counter_check
    return [
        "## The exact backends compute the same function",
        "",
        "`standard` and `sdpa` are two implementations of softmax(QKᵀ/√d)V: same weights and input, fp32, "
        "no dropout. Max |difference| over every length up to "
        f"{settings.agreement_max_length} (batch {settings.batch_sizes[0]}): outputs "
        f"**{results.max_abs_diff_output:.2e}**, input gradients **{results.max_abs_diff_input_grad:.2e}**, "
        "with and without the sliding window (a different function: each backend pair is compared on the same "
        "window). The window in blocks against the same layer given the full (T, T) band mask: at most "
        f"**{results.max_abs_diff_band_mask:.2e}**.",
        "",
        markdown_table(["T", "window", "max abs Δ output", "max abs Δ input grad", "max abs output",
                        "max abs Δ blocks vs band mask"],
                       [[a.length, "yes" if a.windowed else "no", f"{a.max_abs_diff_output:.1e}",
                         f"{a.max_abs_diff_input_grad:.1e}", a.output_scale,
                         f"{a.max_abs_diff_band_mask:.1e}" if a.windowed else None]
                        for a in results.agreement]),
        "",
        f"FLOP count check: `torch.utils.flop_counter` counts {check.counted:,.0f} FLOPs for a "
        f"standard-backend forward+backward at B={check.batch_size}, T={check.length}; the rule gives "
        f"{check.rule:,.0f}, plus {check.masked:,.0f} for the scores written-out attention computes and the "
        "causal mask discards.",
        "",
    ]


def _model_lines(rows: list[ModelStep], settings: AttentionSettings, device: torch.device) -> list[str]:
    headers = ["batch × length", *[f"{v.name} ms/step" for v in VARIANTS], *[f"{v.name} MiB" for v in VARIANTS]]
    body = []
    for length in settings.model_lengths:
        at_length = {r.variant: r for r in rows if r.length == length}
        first = next(iter(at_length.values()))
        body.append([f"{first.batch_size} × {length}",
                     *[1000 * at_length[v.name].seconds if _ok(at_length.get(v.name)) else None
                       for v in VARIANTS],
                     *[at_length[v.name].peak_memory / MiB if _ok(at_length.get(v.name)) else None
                       for v in VARIANTS]])
    dropout = ModelConfig.preset(settings.model_preset).dropout
    notes = [
        f"Encoder-decoder, AdamW, label-smoothed loss, dropout {dropout}, ~{settings.model_tokens:,} tokens per batch "
        "of equal-length sentences (source = target length); the window applies to encoder and decoder "
        f"self-attention. It only removes keys from sentences longer than {settings.window // 2 + 1} tokens in the "
        f"encoder (|i − j| ≤ {settings.window // 2}) and {settings.window} in the decoder (the last "
        f"{settings.window} positions)."]
    if device.type == "cpu" and dropout > 0:
        notes.append("On CPU, PyTorch's fused SDPA kernel does not implement dropout, so in training (dropout > 0) "
                     "`sdpa` falls back to the math implementation, which materialises the scores like "
                     "`standard`: expect similar memory here, unlike on a GPU.")
    return [f"## Whole model: one training step (`{settings.model_preset}` preset)", "", " ".join(notes), "",
            markdown_table(headers, body), ""]


def _training_lines(results: AttentionResults, settings: AttentionSettings) -> list[str]:
    rows = results.training
    body = [[r.variant, r.steps, None if r.seconds_per_batch is None else 1000 * r.seconds_per_batch,
             r.total_seconds, None if r.peak_memory is None else r.peak_memory / MiB,
             None if r.final_val_loss is None else f"{r.final_val_loss:.5f}", r.final_val_bleu]
            for r in rows]
    gap = results.val_loss_gap_standard_vs_sdpa
    seed_gap = results.val_loss_gap_seed
    extra = f" with {' '.join(settings.train_settings)}" if settings.train_settings else ""
    return [
        f"## Training: the same run with each backend (`{settings.train_preset}`{extra}, "
        f"{settings.train_steps} updates)",
        "",
        markdown_table(["attention", "updates", "ms per batch", "total (s)", "peak memory (MiB)", "final val loss",
                        f"val BLEU ({rows[0].bleu_sentences} sent., greedy)"], body),
        "",
        "Time per batch is the mean over the timed updates (the first is left out as warm-up; on CPU the second "
        "is profiled for memory and left out too); total time is the whole `fit()` including the final "
        "validation and checkpoint. Peak memory: on GPU `max_memory_allocated` over the whole `fit()`; on CPU "
        "the profiled second update plus the parameters and AdamW state. Same seed, same initial weights, same "
        "batches.",
        "",
        f"Validation-loss gap standard vs sdpa: **{gap:.2e}**; sdpa vs sdpa from seed + 1 (the run-to-run noise "
        f"of this setup): **{seed_gap:.2e}**." if gap is not None and seed_gap is not None else "",
        "",
    ]


# ---- what the numbers say ---------------------------------------------------------------------------------------
CLAIM_LENGTH, CLAIM_MEMORY_RATIO, CLAIM_SPEEDUP = 1024, 5.0, 2.0  # the reports: >= 5x less memory, >= 2x faster
ROUNDING = 1e-5  # relative difference below which two fp32 implementations compute the same function


def findings(results: AttentionResults, settings: AttentionSettings, device: torch.device) -> list[str]:
    """The conclusions of one run, each sentence chosen by comparing its numbers (written to README.md)."""
    lines = []
    scale = max(a.output_scale for a in results.agreement)
    difference = results.max_abs_diff_output
    if difference <= ROUNDING * max(scale, 1.0):
        lines.append(f"`standard` and `sdpa` agree to {difference:.1e} (outputs of size ~{scale:.2f}): floating-point "
                     "rounding from summing in different orders, not a different function.")
    else:
        lines.append(f"`standard` and `sdpa` differ by {difference:.1e} (outputs of size ~{scale:.2f}): more than "
                     "fp32 rounding — the backends do not compute the same function here.")
    points = [p for p in results.microbenchmark if p.ok and p.batch_size == 1]
    both = sorted({p.length for p in points if p.variant == "standard"}
                  & {p.length for p in points if p.variant == "sdpa"})
    if both:
        length = CLAIM_LENGTH if CLAIM_LENGTH in both else both[-1]
        pick = {p.variant: p for p in points if p.length == length}
        memory = pick["standard"].extra_memory / max(pick["sdpa"].extra_memory, 1)
        speed = pick["standard"].seconds / pick["sdpa"].seconds
        where = f"T = {length}" + ("" if length == CLAIM_LENGTH else " (the longest length both backends ran)")
        lines.append(
            f"At {where}, batch 1, `sdpa` needs {memory:.1f}× less memory than `standard` and runs {speed:.2f}× as "
            f"fast on {device.type}. The claim's memory half (≥ {CLAIM_MEMORY_RATIO:g}× less at T = {CLAIM_LENGTH}) "
            + ("holds" if memory >= CLAIM_MEMORY_RATIO else "does not hold")
            + f" here; its speed half (≥ {CLAIM_SPEEDUP:g}× faster) "
            + ("holds." if speed >= CLAIM_SPEEDUP else "does not."))
    lines += _window_findings(results, settings)
    gap, seed_gap = results.val_loss_gap_standard_vs_sdpa, results.val_loss_gap_seed
    if gap is not None and seed_gap is not None:
        if gap * 3 < seed_gap:
            lines.append(f"Trained the same way, `standard` and `sdpa` end {gap:.1e} apart in validation loss, "
                         f"{seed_gap / max(gap, 1e-12):.0f}× less than two seeds of `sdpa` ({seed_gap:.1e}): the "
                         "same training run up to rounding.")
        else:
            lines.append(f"Trained the same way, `standard` and `sdpa` end {gap:.1e} apart in validation loss, "
                         f"comparable to two seeds of `sdpa` ({seed_gap:.1e}): the backends' runs are different "
                         "samples of the same training process" + (
                             " (on GPU the fused kernels draw attention-dropout masks from their own random "
                             "streams)." if device.type == "cuda" else "."))
    window_gap = results.val_loss_gap_window_vs_sdpa
    if window_gap is not None and seed_gap is not None:
        acts = window_gap > seed_gap / 3
        lines.append(f"The window k = {settings.window} moves the final validation loss by {window_gap:.1e} against "
                     f"{seed_gap:.1e} between seeds: " + ("it changes what is learned at this length." if acts else
                     "it barely acts on this corpus, whose sentences are mostly shorter than the window."))
    return lines


def _window_findings(results: AttentionResults, settings: AttentionSettings) -> list[str]:
    """Memory against k at the sweep's length, for each backend that ran every window and the full layer."""
    lines: list[str] = []
    batch, length = settings.batch_sizes[0], settings.window_length
    narrow, wide = min(settings.windows), max(settings.windows)
    if narrow == wide:
        return lines
    for backend in ("standard", "sdpa"):
        ends = [_point(results.window_sweep, backend, batch, length, k, by_backend=True)
                for k in (narrow, wide)]
        full = _point(results.window_sweep, backend, batch, length, None, by_backend=True)
        if not all(_ok(point) for point in ends):
            continue
        small, large = (point.extra_memory / MiB for point in ends)
        falls = small < large
        sentence = (f"`{backend}` with a window at T = {length}: {small:.3g} MiB at k = {narrow} against "
                    f"{large:.3g} MiB at k = {wide}: memory " + ("falls with k" if falls else "does not fall with k"))
        if _ok(full):
            sentence += f"; without a window {full.extra_memory / MiB:.3g} MiB"
        lines.append(sentence + ".")
    return lines


def plot_against_length(points: list[LayerPoint], settings: AttentionSettings, key: str, label: str,
                        device: torch.device, precision: str) -> Any:
    plt = pyplot()
    figure, axis = plt.subplots(figsize=(7, 5))
    styles = ["-", "--", ":", "-."]
    colors = plt.get_cmap("tab10").colors
    for vi, chosen in enumerate(VARIANTS):
        for bi, batch in enumerate(settings.batch_sizes):
            measured = [p for p in points if p.variant == chosen.name and p.batch_size == batch and p.ok]
            if not measured:
                continue
            values = [getattr(p, key) / (MiB if key != "seconds" else 1) for p in measured]
            axis.plot([p.length for p in measured], [max(v, 1e-9) for v in values], styles[bi % len(styles)],
                      marker="o", color=colors[vi], label=f"{chosen.name}, B={batch}")
    axis.set_xscale("log", base=2)
    axis.set_yscale("log")
    axis.set_xticks(settings.lengths, [str(length) for length in settings.lengths])
    axis.set_xlabel("sequence length T")
    axis.set_ylabel(label)
    axis.set_title(f"{label.split(' (')[0]} vs length ({device.type}, {precision}, d={settings.d_model}, "
                   f"k={settings.window})")
    axis.grid(True, which="both", alpha=0.3)
    axis.legend(fontsize=7)
    return figure


def plot_memory_against_window(sweep: list[LayerPoint], settings: AttentionSettings, device: torch.device,
                               precision: str) -> Any:
    plt = pyplot()
    figure, axis = plt.subplots(figsize=(7, 5))
    colors = plt.get_cmap("tab10").colors
    batch, length = settings.batch_sizes[0], settings.window_length
    for index, backend in enumerate(("standard", "sdpa")):
        windowed = sorted((p for p in sweep if p.backend == backend and p.window is not None and p.ok),
                          key=lambda p: p.window)
        if windowed:
            axis.plot([p.window for p in windowed], [p.extra_memory / MiB for p in windowed], "-", marker="o",
                      color=colors[index], label=f"{backend} + window")
        full = _point(sweep, backend, batch, length, None, by_backend=True)
        if _ok(full):
            axis.axhline(full.extra_memory / MiB, linestyle="--", color=colors[index],
                         label=f"{backend}, no window")
    axis.set_xscale("log", base=2)
    axis.set_yscale("log")
    axis.set_xticks(sorted(settings.windows), [str(k) for k in sorted(settings.windows)])
    axis.set_xlabel("window k")
    axis.set_ylabel("peak memory above inputs (MiB)")
    axis.set_title(f"memory vs window ({device.type}, {precision}, T={length}, B={batch}, d={settings.d_model})")
    axis.grid(True, which="both", alpha=0.3)
    axis.legend(fontsize=7)
    return figure


def print_summary(results: AttentionResults, out: Path) -> None:
    measured = [p for p in results.microbenchmark if p.ok]
    print(f"attention: {len(measured)} points measured on {results.device} ({results.precision})")
    longest = max((p.length for p in measured), default=0)
    for p in measured:
        if p.length == longest:
            print(f"  T={p.length} B={p.batch_size} {p.variant:>16}: {1000 * p.seconds:.2f} ms, "
                  f"{p.extra_memory / MiB:.1f} MiB")
    for p in results.window_sweep:
        if p.ok:
            print(f"  T={p.length} B={p.batch_size} {p.backend:>8} k={p.window or 'none':<5}: "
                  f"{1000 * p.seconds:.2f} ms, {p.extra_memory / MiB:.1f} MiB")
    print(f"max |standard - sdpa|: output {results.max_abs_diff_output:.2e}, "
          f"input grad {results.max_abs_diff_input_grad:.2e}; "
          f"max |window blocks - band mask|: {results.max_abs_diff_band_mask:.2e}")
    for r in results.training:
        loss = r.final_val_loss
        per_batch = r.seconds_per_batch
        print(f"  train {r.variant:>12}: {r.steps} steps, "
              + (f"{1000 * per_batch:.1f} ms/batch, " if per_batch is not None else "")
              + f"total {r.total_seconds:.1f} s, val loss " + (f"{loss:.4f}" if loss is not None else "–"))
    print(f"results in {out}")
