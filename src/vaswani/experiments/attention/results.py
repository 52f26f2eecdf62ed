"""The records of `vaswani experiment attention`: what ``measure`` hands to ``report`` and to results.json.

    results = measure(settings, device)                              # built where it is measured
    write_results(..., results_json(results), ...)                   # the "results" object of results.json
    results = from_json(AttentionResults, payload["results"], path)  # vaswani.records: every field checked

A field that defaults to None holds what a run may not measure (a skipped point's numbers, the band-mask
difference without a window, the loss gaps without a training comparison): the file leaves it out rather than
writing null, and reading a file without it gives None.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any


@dataclass
class LayerPoint:
    """One attention layer's forward+backward at one (batch, length, window): measured when ``status`` is
    "ok", else the reason it was not (time cap, memory guard, out of memory)."""

    variant: str
    backend: str
    batch_size: int
    length: int
    window: int | None
    status: str
    seconds: float | None = None  # median of the timed repeats
    all_seconds: list[float] | None = None
    peak_memory: int | None = None  # bytes: inputs and weights plus what the step added
    extra_memory: int | None = None  # bytes above the inputs and weights
    score_matrix_bytes: int | None = None  # one fp32 B·H·T² score matrix
    flops: float | None = None  # training FLOPs by the project's rule (training.flops)
    tflops_per_s: float | None = None

    @property
    def ok(self) -> bool:
        return self.status == "ok"


@dataclass
class BackendAgreement:
    """Max |standard − sdpa| of one layer's outputs and input gradients, fp32, same weights and input; with
    the window also the blocked window against the full (T, T) band mask."""

    batch_size: int
    length: int
    windowed: bool
    max_abs_diff_output: float
    max_abs_diff_input_grad: float
    output_scale: float  # max |output|: what the differences are read against
    max_abs_diff_band_mask: float | None = None


@dataclass
class FlopCheck:
    """A standard-backend forward+backward: the FLOPs torch.utils.flop_counter counts, the rule's count, and
    the scores the causal mask discards (counted by the counter, not by the rule)."""

    batch_size: int
    length: int
    counted: float
    rule: float
    masked: float


@dataclass
class ModelStep:
    """One training step of the whole model with one variant: measured when ``status`` is "ok"."""

    variant: str
    length: int
    batch_size: int
    status: str
    seconds: float | None = None
    tokens_per_s: float | None = None
    peak_memory: int | None = None
    parameters: int | None = None

    @property
    def ok(self) -> bool:
        return self.status == "ok"


@dataclass
class TrainingRun:
    """The same training run with one variant: time per update, memory and the final validation scores."""

    variant: str
    steps: int
    stop_reason: str
    seconds_per_batch: float | None  # None when no update was timed
    update_seconds: list[float]
    total_seconds: float
    peak_memory: int | None  # None when no update was profiled (CPU)
    parameters: int
    final_val_loss: float | None
    final_val_nll: float | None
    final_val_bleu: float | None
    bleu_sentences: int
    seed: int


@dataclass
class AttentionResults:
    """Every measurement of one run: the "results" object of results.json."""

    device: str
    precision: str
    microbenchmark: list[LayerPoint]
    window_sweep: list[LayerPoint]
    agreement: list[BackendAgreement]
    max_abs_diff_output: float
    max_abs_diff_input_grad: float
    max_abs_diff_band_mask: float
    flop_counter_check: FlopCheck
    model_step: list[ModelStep]
    training: list[TrainingRun]
    memory_method: str
    val_loss_gap_standard_vs_sdpa: float | None = None
    val_loss_gap_window_vs_sdpa: float | None = None
    val_loss_gap_seed: float | None = None


def results_json(results: AttentionResults) -> dict[str, Any]:
    """``results`` as the JSON object of results.json, without the fields left at their None default."""
    return _written(results)


def _written(value: Any) -> Any:
    if dataclasses.is_dataclass(value):
        return {field.name: _written(getattr(value, field.name)) for field in dataclasses.fields(value)
                if not (field.default is None and getattr(value, field.name) is None)}
    if isinstance(value, list):
        return [_written(item) for item in value]
    return value

