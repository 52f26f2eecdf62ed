"""`vaswani experiment memory`: the training memory that ``memory_estimate.py`` predicts for a config and batch,
checked against the measured peak of a real training step; and the largest batch that fits a memory budget,
predicted and then measured.

    memory_estimate.py   the first-principles estimate (what every byte of a step is)
    memory.py            the experiment: settings and command line, the measurement, the budget check
    memory_report.py     table.md, breakdown.png and the printed summary
"""

from __future__ import annotations

import argparse
import dataclasses
from dataclasses import dataclass
from typing import Any

import torch

from vaswani.arguments import add_settings_argument, ranged
from vaswani.config import ModelConfig
from vaswani.devices import resolve_device
from vaswani.experiments.measurement import (
    GiB,
    MiB,
    PeakMemory,
    TrainingStep,
    free_memory,
    memory_method,
    preset_model_config,
    synthetic_batch,
    unless_out_of_memory,
)
from vaswani.experiments.memory_estimate import (
    BatchShape,
    estimate_training_memory,
    largest_batch_within,
    parameter_counts,
)
from vaswani.experiments.memory_report import breakdown_figure, memory_table, print_summary
from vaswani.experiments.reporting import device_label, log, write_results
from vaswani.precision import resolve_precision
from vaswani.records import to_json
from vaswani.settings import MAX_BATCH, MAX_LENGTH, PRECISIONS


# ---- the measurement ----------------------------------------------------------------------------------------
def measure_training_peak(config: ModelConfig, shape: BatchShape, device: torch.device, precision: str,
                          seed: int = 0) -> PeakMemory:
    """Peak tensor memory of one steady-state training step (forward, backward, clipping, AdamW step).

    A first, unmeasured step creates the AdamW moments (and lets kernels pick their workspaces), so the
    measured step starts from the state every later step starts from: parameters + moments, no gradients.
    """
    step = TrainingStep(config, device, precision, seed)
    batch = synthetic_batch(config.vocab_size, shape.batch_size, shape.src_len, shape.tgt_len, device, seed)
    try:
        step(batch)
        return step.peak_memory(batch)
    finally:
        del step, batch
        free_memory(device)


# ---- the experiment -----------------------------------------------------------------------------------------
@dataclass
class MemorySettings:
    preset: str
    model_settings: list[str]
    length: int
    batch_sizes: list[int]
    budget_gb: float
    precision: str
    device: str
    smoke: bool


SMOKE = dict(preset="smoke", length=16, batch_sizes=[2, 8], budget_gb=0.02)
CPU_DEFAULTS = dict(preset="multi30k-cpu", length=32, batch_sizes=[8, 16, 32, 64, 128], budget_gb=1.0)
GPU_DEFAULTS = dict(preset="multi30k-gpu", length=32, batch_sizes=[32, 128, 512], budget_gb=16.0)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--preset", default=None,
                        help="run preset whose model is measured (default: multi30k-cpu on CPU, multi30k-gpu on "
                        "GPU, smoke with --smoke); the model's vocabulary is the preset's data.vocab_size")
    add_settings_argument(parser, ("model",), "model.attention=standard")
    parser.add_argument("--length", type=ranged(int, ge=1, le=MAX_LENGTH), default=None,
                        help="sentence length in tokens (source and target) of the synthetic batches (default 32)")
    parser.add_argument("--batch-sizes", type=ranged(int, ge=1, le=MAX_BATCH), nargs="+", default=None,
                        help="sentences per batch to estimate and measure (default CPU 8..128, GPU 32 128 512)")
    parser.add_argument("--budget-gb", type=ranged(float, gt=0), default=None,
                        help="memory budget (GiB) for the largest-batch search (default CPU 1, GPU 16)")
    parser.add_argument("--precision", default="auto", choices=PRECISIONS,
                        help="auto (default): bf16 where the device has fast bf16, else fp32 (AVX2 CPUs "
                        "emulate bf16)")


def resolve_settings(args: argparse.Namespace, device: torch.device) -> MemorySettings:
    defaults = SMOKE if args.smoke else (GPU_DEFAULTS if device.type == "cuda" else CPU_DEFAULTS)

    def pick(name: str) -> Any:
        value = getattr(args, name)
        return defaults[name] if value is None else value

    return MemorySettings(preset=pick("preset"), model_settings=list(args.settings), length=pick("length"),
                          batch_sizes=list(pick("batch_sizes")), budget_gb=pick("budget_gb"),
                          precision=resolve_precision(args.precision, device), device=str(device),
                          smoke=bool(args.smoke))


def run(args: argparse.Namespace) -> int:
    device = resolve_device(args.device)
    settings = resolve_settings(args, device)
    config = preset_model_config(settings.preset, settings.model_settings)
    n_params, _ = parameter_counts(config)
    log(f"memory: {settings.preset} model ({n_params:,} parameters), {settings.precision} on {device_label(device)}")

    rows = [_row(config, BatchShape(b, settings.length, settings.length), device, settings.precision)
            for b in settings.batch_sizes]
    budget = _budget_check(config, settings, device)
    results = MemoryResults(config.to_dict(), n_params, settings.precision, device_label(device),
                            memory_method(device), rows, budget)
    table = memory_table(settings, config, n_params, rows, budget, device, args.command_line)
    figures = {"breakdown": breakdown_figure(rows, settings, device)}
    write_results(args.out, "memory", args.command_line, device, dataclasses.asdict(settings), to_json(results),
                  table, figures)
    print_summary(rows, budget, args.out)
    return 0


@dataclass
class MeasuredStep:
    """What one measured training step peaked at (bytes); every figure None and an error when it ran out of
    memory."""

    measured_peak: int | None
    measured_at_start: int | None = None
    measured_above_start: int | None = None
    allocator_peak: int | None = None
    error: str | None = None


@dataclass
class MemoryRow:
    """One batch shape: the estimate part by part against the measured step (bytes)."""

    batch_size: int
    length: int
    tokens: int
    estimate: dict[str, float]
    estimate_peak: float
    estimate_sum: float
    estimate_activations: float
    encoder_layer: dict[str, float]
    decoder_layer: dict[str, float]
    measured: MeasuredStep
    relative_error: float | None  # (estimate - measured) / measured


@dataclass
class BudgetCheck:
    """One batch near the budget's predicted largest: estimated and measured against the budget."""

    batch_size: int
    max_tokens: int
    estimate_peak: float
    fits_estimate: bool
    measured: MeasuredStep
    fits_measured: bool | None  # None: out of memory before a peak was measured
    runs_under_cap: bool | None = None  # CUDA only: the step ran with the budget enforced


@dataclass
class BudgetResult:
    budget_gb: float
    length: int
    predicted_batch_size: int
    predicted_max_tokens: int
    checks: list[BudgetCheck]
    note: str | None = None


@dataclass
class MemoryResults:
    model: dict[str, Any]  # the ModelConfig, as config.yaml writes it
    parameters: int
    precision: str
    device: str
    measurement_method: str
    rows: list[MemoryRow]
    budget: BudgetResult


def _row(config: ModelConfig, shape: BatchShape, device: torch.device, precision: str) -> MemoryRow:
    estimate = estimate_training_memory(config, shape, precision, device.type)
    measured = _measure(config, shape, device, precision)
    peak = measured.measured_peak
    row = MemoryRow(shape.batch_size, shape.src_len, shape.tokens, dict(estimate.parts), estimate.peak,
                    estimate.total, estimate.activations, estimate.encoder_layer, estimate.decoder_layer, measured,
                    relative_error=(estimate.peak - peak) / peak if peak else None)
    log(f"  batch {shape.batch_size:>5} × {shape.src_len}: estimated peak {estimate.peak / MiB:9.1f} MiB, measured "
        + (f"{peak / MiB:9.1f} MiB ({row.relative_error:+.1%})" if peak else str(measured.error)))
    return row


def _measure(config: ModelConfig, shape: BatchShape, device: torch.device, precision: str) -> MeasuredStep:
    peak, out_of_memory = unless_out_of_memory(lambda: measure_training_peak(config, shape, device, precision),
                                               device)
    if out_of_memory:
        return MeasuredStep(None, error="out of memory")
    return MeasuredStep(peak.peak, peak.at_start, peak.above_start, peak.allocator_peak)


def _budget_check(config: ModelConfig, settings: MemorySettings, device: torch.device) -> BudgetResult:
    """Predict the largest batch within the budget, then measure it and a 10 % larger one.

    On CUDA the budget is also enforced (``set_per_process_memory_fraction``), so "runs under the cap" means a
    real step ran without an out-of-memory error; on CPU (no OOM to provoke safely) the check is measured
    peak ≤ budget.
    """
    budget = settings.budget_gb * GiB
    length = settings.length
    predicted = largest_batch_within(config, length, budget, settings.precision, device.type)
    result = BudgetResult(settings.budget_gb, length, predicted, predicted * length, checks=[])
    if predicted == 0:
        result.note = "not even one sentence fits the budget by the estimate"
        return result
    for batch_size in (predicted, max(predicted + 1, round(predicted * 1.1))):
        shape = BatchShape(batch_size, length, length)
        estimate = estimate_training_memory(config, shape, settings.precision, device.type).peak
        measured = _measure(config, shape, device, settings.precision)
        # What decides an OOM is everything allocated (on CUDA also cuBLAS workspaces), not only the model's part.
        absolute = measured.allocator_peak or measured.measured_peak
        check = BudgetCheck(batch_size, batch_size * length, estimate, estimate <= budget, measured,
                            fits_measured=None if absolute is None else absolute <= budget)
        if device.type == "cuda":
            check.runs_under_cap = _runs_under_cap(config, shape, device, settings.precision, budget)
        result.checks.append(check)
        shown = "OOM" if measured.measured_peak is None else f"{measured.measured_peak / MiB:.1f} MiB"
        log(f"  budget {settings.budget_gb:g} GiB: batch {batch_size}: estimated peak {estimate / MiB:.1f} MiB, "
            f"measured {shown}")
    return result


def _runs_under_cap(config: ModelConfig, shape: BatchShape, device: torch.device, precision: str,
                    budget: float) -> bool:
    total = torch.cuda.get_device_properties(device).total_memory
    free_memory(device)
    torch.cuda.set_per_process_memory_fraction(min(1.0, budget / total), device)
    try:
        _, out_of_memory = unless_out_of_memory(lambda: measure_training_peak(config, shape, device, precision),
                                                device)
    finally:
        torch.cuda.set_per_process_memory_fraction(1.0, device)
        free_memory(device)
    return not out_of_memory


__all__ = ["MemorySettings", "add_arguments", "measure_training_peak", "resolve_settings", "run"]
