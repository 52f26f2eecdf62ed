"""What `vaswani experiment memory` writes for a reader: table.md (estimate vs measured peak, part by part, and
the largest batch within the budget), breakdown.png, and the summary printed at the end."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from vaswani.config import ModelConfig
from vaswani.experiments.measurement import MiB, memory_method
from vaswani.experiments.memory_estimate import ALWAYS_LIVE, CATEGORIES, TRAINING_STATE
from vaswani.experiments.reporting import markdown_table, provenance_line, pyplot

if TYPE_CHECKING:
    from vaswani.experiments.memory import BudgetResult, MemoryRow, MemorySettings


def _shown(rows: list[MemoryRow]) -> list[str]:
    return [c for c in CATEGORIES if any(r.estimate.get(c) for r in rows)]


def memory_table(settings: MemorySettings, config: ModelConfig, n_params: int, rows: list[MemoryRow],
                 budget: BudgetResult, device: torch.device, command: str) -> str:
    shown = _shown(rows)
    headers = ["batch × len", "tokens", *shown, "sum of parts", "estimated peak", "measured peak", "error"]
    body = [[f"{r.batch_size} × {r.length}", r.tokens, *[r.estimate.get(c, 0) / MiB for c in shown],
             r.estimate_sum / MiB, r.estimate_peak / MiB,
             None if r.measured.measured_peak is None else r.measured.measured_peak / MiB,
             f"{r.relative_error:+.1%}" if r.relative_error is not None else r.measured.error] for r in rows]
    per_layer = [c for c in shown if c not in TRAINING_STATE and c not in ("autocast weight copies", "logits")]
    errors = [abs(r.relative_error) for r in rows if r.relative_error is not None]
    first = rows[0] if rows else None
    lines = [
        f"# Training memory: estimate vs measured peak ({settings.preset} model, {settings.precision})",
        "",
        provenance_line(device, command),
        "",
        f"Model: d_model {config.d_model}, {config.n_heads} heads, {config.n_encoder_layers}+{config.n_decoder_layers}"
        f" layers, d_ff {config.d_ff}, vocabulary {config.vocab_size:,}, attention `{config.attention}`"
        f"{f', window {config.sliding_window}' if config.sliding_window else ''}, dropout {config.dropout}, "
        f"{config.norm}-LN: **{n_params:,} parameters**. Optimizer AdamW. Batches of random real tokens without "
        "padding (N = batch × length target tokens). Sizes in MiB.",
        "",
        markdown_table(headers, body),
        "",
    ]
    if errors:
        lines += [f"Mean |relative error| of the estimated peak: **{sum(errors) / len(errors):.1%}** "
                  f"(largest {max(errors):.1%}).", ""]
    if first:
        lines += [f"Activations saved by one layer at batch {first.batch_size} × {first.length} (MiB):", "",
                  markdown_table(["layer", *per_layer],
                                 [[name, *[layer.get(c, 0) / MiB for c in per_layer]]
                                  for name, layer in (("encoder", first.encoder_layer),
                                                      ("decoder", first.decoder_layer))]), ""]
    lines += [
        "**The estimate.** Parameters, gradients and both AdamW moments are fp32: 4 × 4 bytes per parameter. "
        "Activations are what autograd saves for backward, operation by operation: each Linear's input, the "
        "fused Q/K/V projection output, for the standard backend the B·H·T² softmax output (fp32) and, with "
        "dropout, its dropout mask and the dropped copy; for SDPA with a fused kernel only its output and one "
        "log-sum-exp per query (on CPU the fused kernel has no dropout, so training with dropout falls back to "
        "PyTorch's math path, which saves the B·H·T² tensors as the standard backend does); the FFN hidden layer "
        "and its dropped copy; dropout masks (1-byte booleans on every device, `vaswani.model.Dropout`; dropout "
        "on the attention weights keeps a noise tensor of their dtype on the CPU); LayerNorm inputs with their "
        "mean and 1/std. Logits: the fp32 N×V log-probabilities saved by the loss plus two N×V transients. "
        "**Peak = parameters + moments + max(activations + logits, gradients)**: "
        "gradients are set to None after each update, so backward starts with every activation live and no "
        "gradient yet; the sum of all parts is the naive upper bound.",
        "",
        f"**The measurement.** {memory_method(device)}. A warm-up step first creates the AdamW moments; the measured "
        "step is forward, backward, gradient clipping and the optimizer step.",
        "",
    ]
    lines += _budget_lines(budget, device)
    return "\n".join(lines)


def _budget_lines(budget: BudgetResult, device: torch.device) -> list[str]:
    lines = [f"## Largest batch within {budget.budget_gb:g} GiB", "",
             f"Predicted by the estimate: **{budget.predicted_batch_size:,} sentences of {budget.length} "
             f"tokens = max_tokens {budget.predicted_max_tokens:,}** (sentences of the full length: the worst "
             "case of a token budget, since attention grows with the square of the length).", ""]
    if not budget.checks:
        return lines + [budget.note or "", ""]
    headers = ["batch", "max_tokens", "estimated peak", "measured peak", "within budget (measured)"]
    if device.type == "cuda":
        headers[4:4] = ["allocator peak"]
        headers.append("runs under an enforced cap")
    body = []
    for c in budget.checks:
        measured = c.measured
        row = [c.batch_size, c.max_tokens, c.estimate_peak / MiB,
               None if measured.measured_peak is None else measured.measured_peak / MiB,
               {True: "yes", False: "no", None: measured.error}[c.fits_measured]]
        if device.type == "cuda":
            row[4:4] = [None if measured.allocator_peak is None else measured.allocator_peak / MiB]
            row.append("yes" if c.runs_under_cap else "no (OOM)")
        body.append(row)
    lines += [markdown_table(headers, body), ""]
    if device.type == "cuda":
        lines.append("*Allocator peak* is `max_memory_allocated` itself, including what lives outside the model "
                     "(cuBLAS workspaces); it decides whether the batch fits. The cap is "
                     "`torch.cuda.set_per_process_memory_fraction(budget / total)`: the caching allocator "
                     "refuses to reserve more, so the step really runs out of memory above it. Reserved memory "
                     "(fragmentation) can exceed allocated memory, so a batch can fail under the cap while its "
                     "allocated peak is below the budget.")
    else:
        lines.append("On CPU nothing is allowed to run out of memory, so the check compares the measured peak with "
                     "the budget instead of provoking an OOM; the process's real footprint is larger by oneDNN "
                     "scratch, Python and the allocator's fragmentation.")
    return lines + [""]


def breakdown_figure(rows: list[MemoryRow], settings: MemorySettings, device: torch.device) -> Any:
    """Stacked bars of the peak's composition per batch; gradients (not live at the peak) as a hatched bar
    beside; the measured peak as a black tick."""
    plt = pyplot()
    figure, axis = plt.subplots(figsize=(9, 5))
    x = list(range(len(rows)))
    bottom = [0.0] * len(rows)
    colors = plt.get_cmap("tab20").colors
    for index, category in enumerate(c for c in _shown(rows) if c != "gradients"):
        values = [r.estimate.get(category, 0) / MiB for r in rows]
        axis.bar([i - 0.15 for i in x], values, bottom=bottom, width=0.5, label=category,
                 color=colors[index % len(colors)])
        bottom = [b + v for b, v in zip(bottom, values)]
    always = [sum(r.estimate.get(c, 0) for c in ALWAYS_LIVE) / MiB for r in rows]
    axis.bar([i + 0.25 for i in x], [r.estimate["gradients"] / MiB for r in rows], bottom=always, width=0.2,
             color="white", edgecolor="grey", hatch="//", label="gradients (live in the optimizer step instead)")
    measured = [(i - 0.15, r.measured.measured_peak / MiB) for i, r in enumerate(rows) if r.measured.measured_peak]
    if measured:
        axis.scatter(*zip(*measured), color="black", marker="_", s=1200, linewidths=2.5, zorder=5,
                     label="measured peak")
    axis.set_xticks(x, [f"{r.batch_size}×{r.length}" for r in rows])
    axis.set_xlabel("batch (sentences × tokens)")
    axis.set_ylabel("MiB")
    axis.set_title(f"Training memory by part: {settings.preset} model, {settings.precision}, {device.type}")
    axis.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return figure


def print_summary(rows: list[MemoryRow], budget: BudgetResult, out: Any) -> None:
    for r in rows:
        peak = r.measured.measured_peak
        measured = f"{peak / MiB:.1f} MiB" if peak else r.measured.error or "–"
        error = f" ({r.relative_error:+.1%})" if r.relative_error is not None else ""
        print(f"batch {r.batch_size}x{r.length}: estimated peak {r.estimate_peak / MiB:.1f} MiB, "
              f"measured {measured}{error}")
    print(f"largest batch within {budget.budget_gb:g} GiB: {budget.predicted_batch_size} x {budget.length} "
          f"= {budget.predicted_max_tokens} tokens (predicted); results in {out}")


__all__ = ["breakdown_figure", "memory_table", "print_summary"]
