"""`vaswani experiment memory`: training memory of a config and batch, estimated from first principles and
checked against the measured peak; and the largest batch that fits a memory budget.

The estimate names every byte a training step holds:

- the training state: fp32 parameters, their gradients and AdamW's two moments, 4 × 4 bytes per parameter
  (plus, under bf16/fp16 autocast, the 2-byte weight copies that autocast caches and backward keeps);
- the activations each operation saves for backward, enumerated layer by layer from what autograd keeps (see
  :func:`_sublayer_attention` and friends): Linear inputs, Q/K/V, the B·H·T² attention probabilities (with
  their dropout mask and dropped copy) of the standard backend, the FFN hidden layer, dropout masks, LayerNorm
  inputs;
- the logits: the N×V fp32 logits and the log-probabilities the loss saves from them (backward turns those
  into the gradient in place, so no third N×V tensor appears), and the N×d gradient of the decoder states that
  the output projection's backward allocates while that gradient is still alive: the peak is there.

The *peak* is not the sum of all of them: the trainer frees gradients to None after every update, so when
backward starts every activation is live and no gradient exists yet, and by the optimizer step the activations
are gone. Peak = parameters + moments (+ autocast copies) + max(activations + logits, gradients).

Known gaps: on CPU with bf16 and SDPA + dropout, PyTorch's math fallback computes in fp32 internally and the
estimate is ~10 % low; cuBLAS/cuDNN workspaces and the CUDA context are not tensors and are not counted.
"""

from __future__ import annotations

import argparse
import dataclasses
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn as nn

from vaswani.config import PRECISIONS, ModelConfig, add_settings_argument, apply_model_settings, ranged
from vaswani.devices import resolve_device
from vaswani.experiments.common import (
    CPU_METHOD,
    CUDA_METHOD,
    GiB,
    MiB,
    PeakMemory,
    TrainingStep,
    device_label,
    free_memory,
    log,
    markdown_table,
    provenance_line,
    pyplot,
    synthetic_batch,
    unless_out_of_memory,
    write_results,
)
from vaswani.precision import resolve_precision

# Categories of the breakdown, in the order the stacked bars draw them.
CATEGORIES = (
    "parameters",
    "gradients",
    "adamw moments",
    "autocast weight copies",
    "linear-layer inputs",
    "attention q/k/v/out",
    "attention scores (B·H·T²)",
    "ffn hidden",
    "dropout masks",
    "layernorm inputs",
    "masks and indices",
    "logits",
)
TRAINING_STATE = ("parameters", "gradients", "adamw moments")
BYTES = {"fp32": 4, "bf16": 2, "fp16": 2}


# ---- the estimate -------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class BatchShape:
    """A batch of ``batch_size`` pairs, every position a real token (no padding): N = batch_size × tgt_len."""

    batch_size: int
    src_len: int
    tgt_len: int

    @property
    def tokens(self) -> int:
        return self.batch_size * max(self.src_len, self.tgt_len)

    @property
    def target_tokens(self) -> int:
        return self.batch_size * self.tgt_len


@dataclass
class MemoryEstimate:
    parts: dict[str, float] = field(default_factory=lambda: defaultdict(float))  # category -> bytes
    encoder_layer: dict[str, float] = field(default_factory=dict)  # activations of one layer, by category
    decoder_layer: dict[str, float] = field(default_factory=dict)

    @property
    def total(self) -> float:
        """Every part at once: an upper bound (gradients and activations are never all live together)."""
        return sum(self.parts.values())

    @property
    def activations(self) -> float:
        """Saved activations and the logits: everything that scales with the batch."""
        return sum(v for k, v in self.parts.items() if k not in TRAINING_STATE and k != "autocast weight copies")

    @property
    def peak(self) -> float:
        """The estimate of the peak: parameters, moments (and autocast copies) are always live; on top comes
        the larger of the activations (all live when backward starts, before any gradient exists: gradients
        are freed to None after every step) and the gradients (all live in the optimizer step, when the
        activations are gone)."""
        always = self.total - self.activations - self.parts.get("gradients", 0.0)
        return always + max(self.activations, self.parts.get("gradients", 0.0))


@dataclass(frozen=True)
class _Dtypes:
    """Bytes per element of what a training step stores, for one precision on one device type."""

    act: int  # outputs of matmuls (autocast dtype)
    mask_cuda: bool  # F.dropout (on the attention weights) saves a 1-byte mask on CUDA, a noise tensor on CPU
    stream: int = 4  # residual stream, LayerNorm inputs/outputs, softmax of the standard backend: fp32 always

    def dropout_mask(self, input_bytes: int) -> int:
        return 1 if self.mask_cuda else input_bytes


class _Tally:
    def __init__(self) -> None:
        self.parts: dict[str, float] = defaultdict(float)

    def add(self, category: str, elements: float, bytes_per_element: int) -> None:
        self.parts[category] += float(elements) * bytes_per_element


def sdpa_is_fused(device_type: str, dropout: float) -> bool:
    """Does F.scaled_dot_product_attention run a fused kernel (no B·H·T² tensors saved) in training?

    On CUDA the flash / memory-efficient kernels handle dropout and masks. On CPU the fused (flash) kernel
    requires dropout_p == 0; with dropout PyTorch falls back to its composite "math" implementation, which
    saves the attention probabilities like the standard backend does.
    """
    return device_type == "cuda" or dropout == 0.0


def _sublayer_attention(t: _Tally, c: ModelConfig, dt: _Dtypes, batch: int, n_q: int, n_k: int, cross: bool,
                        mask_elements: int, device_type: str, dropout: float) -> None:
    """What one attention module saves (its input is counted by the residual sublayer that calls it)."""
    a, d, h = dt.act, c.d_model, c.n_heads
    scores = batch * h * n_q * n_k
    if cross:
        t.add("attention q/k/v/out", batch * n_q * d, a)  # q
        t.add("attention q/k/v/out", 2 * batch * n_k * d, a)  # k, v of the encoder output
    else:
        t.add("attention q/k/v/out", 3 * batch * n_q * d, a)  # the fused qkv projection (q, k, v are views)
        if c.positions == "rope":
            t.add("attention q/k/v/out", 2 * batch * n_q * d, a)  # rotated copies of q and k
    if c.attention == "standard":
        t.add("attention scores (B·H·T²)", scores, 4)  # softmax output, computed in fp32 on purpose
        if dropout > 0:
            t.add("attention scores (B·H·T²)", scores, dt.dropout_mask(a))  # dropout mask of the weights
            t.add("attention scores (B·H·T²)", scores, a)  # dropped weights, saved by weights @ v
        elif a != 4:
            t.add("attention scores (B·H·T²)", scores, a)  # the autocast-dtype copy saved by weights @ v
        t.add("masks and indices", mask_elements, 1)  # the boolean mask saved by masked_fill
    elif sdpa_is_fused(device_type, dropout):
        # The kernel keeps its output for backward; it is laid out (B, T, H, d), so concatenating the heads is
        # a view and out_proj saves the same storage.
        t.add("attention q/k/v/out", batch * n_q * d, a)
        t.add("attention q/k/v/out", batch * h * n_q, 4)  # log-sum-exp per query row
        t.add("masks and indices", mask_elements, a)  # boolean mask turned into an additive one
        return
    else:  # CPU math fallback (dropout > 0): the standard computation, softmax in the input dtype
        t.add("attention scores (B·H·T²)", scores, a)  # softmax output
        t.add("attention scores (B·H·T²)", scores, dt.dropout_mask(a))
        t.add("attention scores (B·H·T²)", scores, a)
    t.add("linear-layer inputs", batch * n_q * d, a)  # heads concatenated (a copy), saved by out_proj


def _residual(t: _Tally, c: ModelConfig, dt: _Dtypes, tokens: int, dropout: float) -> None:
    """Residual + LayerNorm around a sublayer: the sublayer's input as saved by its first Linear, the dropout
    mask of the sublayer output, and the LayerNorm input (post-LN: the sum; pre-LN: x) with its mean/rstd."""
    d = c.d_model
    t.add("linear-layer inputs", tokens * d, dt.act)
    if dropout > 0:
        t.add("dropout masks", tokens * d, 1)  # vaswani.model.dropout keeps a bool mask on every device
    t.add("layernorm inputs", tokens * d, dt.stream)
    t.add("layernorm inputs", 2 * tokens, 4)  # mean and 1/std per position


def _feed_forward(t: _Tally, c: ModelConfig, dt: _Dtypes, tokens: int, dropout: float) -> None:
    hidden = tokens * c.d_ff
    # ReLU saves its output, GELU its input: one hidden tensor either way.
    t.add("ffn hidden", hidden, dt.act)
    if dropout > 0:
        t.add("dropout masks", hidden, 1)
        t.add("ffn hidden", hidden, dt.act)  # the dropped hidden layer, saved by the down projection
    elif c.activation == "gelu":
        t.add("ffn hidden", hidden, dt.act)  # GELU's output is a second tensor, saved by the down projection


def encoder_layer_activations(c: ModelConfig, dt: _Dtypes, batch: int, src_len: int, device_type: str) -> _Tally:
    t = _Tally()
    p, tokens = c.dropout, batch * src_len
    window = c.sliding_window is not None
    mask_elements = batch * src_len * (src_len if window else 1)  # (B,1,1,S) padding, or (B,1,S,S) & window
    _residual(t, c, dt, tokens, p)
    _sublayer_attention(t, c, dt, batch, src_len, src_len, False, mask_elements, device_type, c.attention_dropout)
    _residual(t, c, dt, tokens, p)
    _feed_forward(t, c, dt, tokens, p)
    return t


def decoder_layer_activations(c: ModelConfig, dt: _Dtypes, batch: int, src_len: int, tgt_len: int,
                              device_type: str) -> _Tally:
    t = _Tally()
    p, tokens = c.dropout, batch * tgt_len
    self_mask = tgt_len * tgt_len  # causal (1,1,T,T), also with a window
    _residual(t, c, dt, tokens, p)
    _sublayer_attention(t, c, dt, batch, tgt_len, tgt_len, False, self_mask, device_type, c.attention_dropout)
    _residual(t, c, dt, tokens, p)
    _sublayer_attention(t, c, dt, batch, tgt_len, src_len, True, batch * src_len, device_type,
                        c.attention_dropout)
    if dt.act != 4:  # autocast casts the (fp32) encoder output to bf16 again in every layer's kv projection
        t.add("linear-layer inputs", batch * src_len * c.d_model, dt.act)
    _residual(t, c, dt, tokens, p)
    _feed_forward(t, c, dt, tokens, p)
    return t


def parameter_counts(config: ModelConfig) -> tuple[int, int]:
    """(trainable parameters, parameters of nn.Linear modules), from a model built on the meta device: exact
    and free (no memory is allocated)."""
    from vaswani.model import Transformer

    with torch.device("meta"):
        model = Transformer(config)
    linear = {id(p): p.numel() for m in model.modules() if isinstance(m, nn.Linear) for p in m.parameters()}
    return model.num_parameters(), sum(linear.values())


def estimate_training_memory(config: ModelConfig, shape: BatchShape, precision: str = "fp32",
                             device_type: str = "cpu") -> MemoryEstimate:
    """Bytes of one training step with AdamW on ``shape``, by category (see the module docstring)."""
    n_params, n_linear = parameter_counts(config)
    dt = _Dtypes(act=BYTES[precision], mask_cuda=device_type == "cuda")
    b, s, tgt = shape.batch_size, shape.src_len, shape.tgt_len
    n, d, v = shape.target_tokens, config.d_model, config.vocab_size
    estimate = MemoryEstimate()
    parts = estimate.parts
    parts["parameters"] = 4 * n_params  # fp32 master weights, also under autocast
    parts["gradients"] = 4 * n_params
    parts["adamw moments"] = 2 * 4 * n_params  # exp_avg and exp_avg_sq
    if dt.act != 4:
        parts["autocast weight copies"] = dt.act * n_linear  # cached casts, kept by backward

    encoder = encoder_layer_activations(config, dt, b, s, device_type)
    decoder = decoder_layer_activations(config, dt, b, s, tgt, device_type)
    estimate.encoder_layer, estimate.decoder_layer = dict(encoder.parts), dict(decoder.parts)
    for layer, count in ((encoder, config.n_encoder_layers), (decoder, config.n_decoder_layers)):
        for category, value in layer.parts.items():
            parts[category] += count * value

    t = _Tally()
    for tokens in (b * s, b * tgt):  # embeddings: ids saved by the lookup, dropout mask of the sum
        t.add("masks and indices", tokens, 8)
        if config.dropout > 0:
            t.add("dropout masks", tokens * d, 1)
    if config.norm == "pre":  # final LayerNorms of encoder and decoder
        t.add("layernorm inputs", b * (s + tgt) * d, dt.stream)
    if dt.act == 4:  # the encoder output, saved once by the (fp32) kv projections of all decoder layers
        t.add("linear-layer inputs", b * s * d, dt.act)
    t.add("masks and indices", n * 2, 8)  # indices of the real target positions (hidden[real])
    t.add("linear-layer inputs", n * d, dt.act)  # gathered decoder states, saved by the output projection
    t.add("logits", 2 * n * v, 4)  # the logits and the log-probs saved from them (which become the gradient)
    # The peak comes in backward, at the output projection: its input gradient (N × d) is allocated while the
    # logits' gradient is still alive.
    t.add("logits", n * d, dt.act)
    for category, value in t.parts.items():
        parts[category] += value
    return estimate


def largest_batch_within(config: ModelConfig, length: int, budget_bytes: float, precision: str,
                         device_type: str) -> int:
    """The largest batch size (sentences of ``length`` tokens) whose estimated peak stays within the budget.

    The estimate grows monotonically with the batch size, so doubling then bisecting finds it exactly.
    """
    def fits(batch: int) -> bool:
        shape = BatchShape(batch, length, length)
        return estimate_training_memory(config, shape, precision, device_type).peak <= budget_bytes

    if not fits(1):
        return 0
    low, high = 1, 2
    while fits(high):
        low, high = high, high * 2
    while high - low > 1:  # fits(low), not fits(high)
        middle = (low + high) // 2
        low, high = (middle, high) if fits(middle) else (low, middle)
    return low


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
ALWAYS_LIVE = ("parameters", "adamw moments", "autocast weight copies")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--preset", default=None,
                        help="run preset whose model is measured (default: multi30k-cpu on CPU, multi30k-gpu on "
                        "GPU, smoke with --smoke); the model's vocabulary is the preset's data.vocab_size")
    add_settings_argument(parser, ("model",), "model.attention=standard")
    parser.add_argument("--length", type=ranged(int, ge=1), default=None,
                        help="sentence length in tokens (source and target) of the synthetic batches (default 32)")
    parser.add_argument("--batch-sizes", type=ranged(int, ge=1), nargs="+", default=None,
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


def model_config(preset: str, model_settings: list[str]) -> ModelConfig:
    """The preset's model with the vocabulary the trainer would give it (the tokenizer's, ≈ data.vocab_size)."""
    from vaswani.training.config import load_preset

    run_config = load_preset(preset)
    config = dataclasses.replace(run_config.model, vocab_size=run_config.data.vocab_size)
    return apply_model_settings(config, model_settings)


def run(args: argparse.Namespace) -> int:
    device = resolve_device(args.device)
    settings = resolve_settings(args, device)
    config = model_config(settings.preset, settings.model_settings)
    n_params, _ = parameter_counts(config)
    log(f"memory: {settings.preset} model ({n_params:,} parameters), {settings.precision} on {device_label(device)}")

    rows = [_row(config, BatchShape(b, settings.length, settings.length), device, settings.precision)
            for b in settings.batch_sizes]
    budget = _budget_check(config, settings, device)
    results = {"model": config.to_dict(), "parameters": n_params, "precision": settings.precision,
               "device": device_label(device), "measurement_method": _method(device), "rows": rows,
               "budget": budget}
    table = _table(settings, config, n_params, rows, budget, device, args.command_line)
    figures = {"breakdown": _plot(rows, settings, device)}
    write_results(args.out, "memory", args.command_line, device, dataclasses.asdict(settings), results, table,
                  figures)
    _print_summary(rows, budget, args.out)
    return 0


def _row(config: ModelConfig, shape: BatchShape, device: torch.device, precision: str) -> dict[str, Any]:
    estimate = estimate_training_memory(config, shape, precision, device.type)
    row: dict[str, Any] = {"batch_size": shape.batch_size, "length": shape.src_len, "tokens": shape.tokens,
                           "estimate": dict(estimate.parts), "estimate_peak": estimate.peak,
                           "estimate_sum": estimate.total, "estimate_activations": estimate.activations,
                           "encoder_layer": estimate.encoder_layer, "decoder_layer": estimate.decoder_layer}
    row.update(_measure(config, shape, device, precision))
    if row["measured_peak"]:
        row["relative_error"] = (estimate.peak - row["measured_peak"]) / row["measured_peak"]
    log(f"  batch {shape.batch_size:>5} × {shape.src_len}: estimated peak {estimate.peak / MiB:9.1f} MiB, measured "
        + (f"{row['measured_peak'] / MiB:9.1f} MiB ({row['relative_error']:+.1%})" if row["measured_peak"]
           else str(row.get("error"))))
    return row


def _measure(config: ModelConfig, shape: BatchShape, device: torch.device, precision: str) -> dict[str, Any]:
    peak, out_of_memory = unless_out_of_memory(lambda: measure_training_peak(config, shape, device, precision),
                                               device)
    if out_of_memory:
        return {"measured_peak": None, "error": "out of memory"}
    return {"measured_peak": peak.peak, "measured_at_start": peak.at_start, "measured_above_start": peak.above_start,
            "allocator_peak": peak.allocator_peak}


def _method(device: torch.device) -> str:
    return CUDA_METHOD if device.type == "cuda" else CPU_METHOD


def _budget_check(config: ModelConfig, settings: MemorySettings, device: torch.device) -> dict[str, Any]:
    """Predict the largest batch within the budget, then measure it and a 10 % larger one.

    On CUDA the budget is also enforced (``set_per_process_memory_fraction``), so "runs under the cap" means a
    real step ran without an out-of-memory error; on CPU (no OOM to provoke safely) the check is measured
    peak ≤ budget.
    """
    budget = settings.budget_gb * GiB
    length = settings.length
    predicted = largest_batch_within(config, length, budget, settings.precision, device.type)
    result: dict[str, Any] = {"budget_gb": settings.budget_gb, "length": length, "predicted_batch_size": predicted,
                              "predicted_max_tokens": predicted * length, "checks": []}
    if predicted == 0:
        result["note"] = "not even one sentence fits the budget by the estimate"
        return result
    for batch_size in (predicted, max(predicted + 1, round(predicted * 1.1))):
        shape = BatchShape(batch_size, length, length)
        estimate = estimate_training_memory(config, shape, settings.precision, device.type).peak
        check: dict[str, Any] = {"batch_size": batch_size, "max_tokens": batch_size * length,
                                 "estimate_peak": estimate, "fits_estimate": estimate <= budget}
        check.update(_measure(config, shape, device, settings.precision))
        # What decides an OOM is everything allocated (on CUDA also cuBLAS workspaces), not only the model's part.
        absolute = check.get("allocator_peak") or check["measured_peak"]
        check["fits_measured"] = None if absolute is None else absolute <= budget
        if device.type == "cuda":
            check["runs_under_cap"] = _runs_under_cap(config, shape, device, settings.precision, budget)
        result["checks"].append(check)
        measured = "OOM" if check["measured_peak"] is None else f"{check['measured_peak'] / MiB:.1f} MiB"
        log(f"  budget {settings.budget_gb:g} GiB: batch {batch_size}: estimated peak {estimate / MiB:.1f} MiB, "
            f"measured {measured}")
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


def _shown(rows: list[dict]) -> list[str]:
    return [c for c in CATEGORIES if any(r["estimate"].get(c) for r in rows)]


def _table(settings: MemorySettings, config: ModelConfig, n_params: int, rows: list[dict], budget: dict,
           device: torch.device, command: str) -> str:
    shown = _shown(rows)
    headers = ["batch × len", "tokens", *shown, "sum of parts", "estimated peak", "measured peak", "error"]
    body = [[f"{r['batch_size']} × {r['length']}", r["tokens"], *[r["estimate"].get(c, 0) / MiB for c in shown],
             r["estimate_sum"] / MiB, r["estimate_peak"] / MiB,
             None if r["measured_peak"] is None else r["measured_peak"] / MiB,
             f"{r['relative_error']:+.1%}" if "relative_error" in r else r.get("error")] for r in rows]
    per_layer = [c for c in shown if c not in TRAINING_STATE and c not in ("autocast weight copies", "logits")]
    errors = [abs(r["relative_error"]) for r in rows if "relative_error" in r]
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
        lines += [f"Activations saved by one layer at batch {first['batch_size']} × {first['length']} (MiB):", "",
                  markdown_table(["layer", *per_layer],
                                 [[name.split("_")[0], *[first[name].get(c, 0) / MiB for c in per_layer]]
                                  for name in ("encoder_layer", "decoder_layer")]), ""]
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
        f"**The measurement.** {_method(device)}. A warm-up step first creates the AdamW moments; the measured "
        "step is forward, backward, gradient clipping and the optimizer step.",
        "",
    ]
    lines += _budget_lines(budget, device)
    return "\n".join(lines)


def _budget_lines(budget: dict, device: torch.device) -> list[str]:
    lines = [f"## Largest batch within {budget['budget_gb']:g} GiB", "",
             f"Predicted by the estimate: **{budget['predicted_batch_size']:,} sentences of {budget['length']} "
             f"tokens = max_tokens {budget['predicted_max_tokens']:,}** (sentences of the full length: the worst "
             "case of a token budget, since attention grows with the square of the length).", ""]
    if not budget["checks"]:
        return lines + [budget.get("note", ""), ""]
    headers = ["batch", "max_tokens", "estimated peak", "measured peak", "within budget (measured)"]
    if device.type == "cuda":
        headers[4:4] = ["allocator peak"]
        headers.append("runs under an enforced cap")
    body = []
    for c in budget["checks"]:
        row = [c["batch_size"], c["max_tokens"], c["estimate_peak"] / MiB,
               None if c["measured_peak"] is None else c["measured_peak"] / MiB,
               {True: "yes", False: "no", None: c.get("error")}[c["fits_measured"]]]
        if device.type == "cuda":
            row[4:4] = [None if c.get("allocator_peak") is None else c["allocator_peak"] / MiB]
            row.append("yes" if c["runs_under_cap"] else "no (OOM)")
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


def _plot(rows: list[dict], settings: MemorySettings, device: torch.device) -> Any:
    """Stacked bars of the peak's composition per batch; gradients (not live at the peak) as a hatched bar
    beside; the measured peak as a black tick."""
    plt = pyplot()
    figure, axis = plt.subplots(figsize=(9, 5))
    x = list(range(len(rows)))
    bottom = [0.0] * len(rows)
    colors = plt.get_cmap("tab20").colors
    for index, category in enumerate(c for c in _shown(rows) if c != "gradients"):
        values = [r["estimate"].get(category, 0) / MiB for r in rows]
        axis.bar([i - 0.15 for i in x], values, bottom=bottom, width=0.5, label=category,
                 color=colors[index % len(colors)])
        bottom = [b + v for b, v in zip(bottom, values)]
    always = [sum(r["estimate"].get(c, 0) for c in ALWAYS_LIVE) / MiB for r in rows]
    axis.bar([i + 0.25 for i in x], [r["estimate"]["gradients"] / MiB for r in rows], bottom=always, width=0.2,
             color="white", edgecolor="grey", hatch="//", label="gradients (live in the optimizer step instead)")
    measured = [(i - 0.15, r["measured_peak"] / MiB) for i, r in enumerate(rows) if r["measured_peak"]]
    if measured:
        axis.scatter(*zip(*measured), color="black", marker="_", s=1200, linewidths=2.5, zorder=5,
                     label="measured peak")
    axis.set_xticks(x, [f"{r['batch_size']}×{r['length']}" for r in rows])
    axis.set_xlabel("batch (sentences × tokens)")
    axis.set_ylabel("MiB")
    axis.set_title(f"Training memory by part: {settings.preset} model, {settings.precision}, {device.type}")
    axis.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return figure


def _print_summary(rows: list[dict], budget: dict, out: Any) -> None:
    for r in rows:
        measured = f"{r['measured_peak'] / MiB:.1f} MiB" if r["measured_peak"] else r.get("error", "–")
        error = f" ({r['relative_error']:+.1%})" if "relative_error" in r else ""
        print(f"batch {r['batch_size']}x{r['length']}: estimated peak {r['estimate_peak'] / MiB:.1f} MiB, "
              f"measured {measured}{error}")
    print(f"largest batch within {budget['budget_gb']:g} GiB: {budget['predicted_batch_size']} x {budget['length']} "
          f"= {budget['predicted_max_tokens']} tokens (predicted); results in {out}")
