"""`vaswani experiment attention`: what the attention backend costs, and that the exact ones agree.

Four variants of one ``MultiHeadAttention`` layer (self-attention, the encoder's form by default):

- ``standard``: softmax(QKᵀ/√d)V written out; it materialises the B·H·T² scores;
- ``sdpa``: ``F.scaled_dot_product_attention`` (flash / memory-efficient kernels on GPU, a fused kernel on CPU);
- ``standard+window`` and ``sdpa+window``: the same two with a sliding-window mask of k keys
  (``masks.sliding_window_mask``). A mask restricts *which* scores count, not how many are computed: both
  kernels still compute all T² of them, so the window changes the function, not the cost.

Measured per variant, batch size and sequence length: forward+backward time and peak memory, next to the
analytic FLOPs. Then a whole-model training step per variant, and (``--train-steps N``) the same training run
with each variant: time per batch, total time, peak memory, final validation loss.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from vaswani.config import DEFAULT_SLIDING_WINDOW, PRECISIONS, ModelConfig, ranged
from vaswani.data.commands import add_data_dir_argument
from vaswani.experiments.common import (
    MiB,
    PeakMemory,
    TrainingStep,
    available_ram_bytes,
    device_label,
    free_memory,
    log,
    markdown_table,
    provenance_line,
    pyplot,
    sync,
    synthetic_batch,
    tensor_bytes,
    time_call,
    unless_out_of_memory,
    track_peak_memory,
    training_state_bytes,
    write_results,
)
from vaswani.model.attention import MultiHeadAttention
from vaswani.model.masks import sliding_window_mask
from vaswani.precision import autocast, resolve_precision
from vaswani.training.step import StepResult
from vaswani.training.trainer import Callback, Trainer


@dataclass(frozen=True)
class Variant:
    name: str
    backend: str  # "standard" | "sdpa"
    windowed: bool


VARIANTS = (Variant("standard", "standard", False), Variant("sdpa", "sdpa", False),
            Variant("standard+window", "standard", True), Variant("sdpa+window", "sdpa", True))
TRAINING_VARIANTS = ("standard", "sdpa", "sdpa+window", "sdpa, seed+1")
SEED_NOISE_VARIANT = "sdpa, seed+1"  # sdpa again from another seed: the run-to-run noise a backend gap is read against
TRAINING_BLEU_SENTENCES = 200  # validation sentences greedily decoded after each training run (--smoke: 16)


@dataclass
class AttentionSettings:
    # microbenchmark of one layer
    d_model: int
    n_heads: int
    lengths: list[int]
    batch_sizes: list[int]
    window: int
    causal: bool
    dropout: float
    warmup: int
    repeats: int
    max_seconds: float  # time cap per point: longer points of the same variant/batch are skipped
    agreement_max_length: int
    # whole-model training step
    model_preset: str
    model_lengths: list[int]
    model_tokens: int
    # training comparison
    train_steps: int
    train_preset: str
    train_settings: list[str]
    data_dir: str | None
    precision: str
    smoke: bool


SMOKE = dict(d_model=64, n_heads=4, lengths=[32, 64], batch_sizes=[2], warmup=1, repeats=1, max_seconds=5.0,
             agreement_max_length=64, model_preset="tiny", model_lengths=[16, 64], model_tokens=256,
             train_preset="smoke")
CPU_DEFAULTS = dict(d_model=512, n_heads=8, lengths=[64, 128, 256, 512, 1024, 2048], batch_sizes=[1, 8], warmup=1,
                    repeats=3, max_seconds=20.0, agreement_max_length=1024, model_preset="small",
                    model_lengths=[32, 128, 512], model_tokens=1024, train_preset="multi30k-cpu")
GPU_DEFAULTS = dict(d_model=512, n_heads=8, lengths=[64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384],
                    batch_sizes=[1, 8, 32], warmup=3, repeats=10, max_seconds=10.0, agreement_max_length=4096,
                    model_preset="small", model_lengths=[32, 128, 512, 2048], model_tokens=8192,
                    train_preset="multi30k-gpu")


# ---- analytic FLOPs -----------------------------------------------------------------------------------------
def attended_keys(length: int, causal: bool, window: int | None) -> float:
    """Mean number of keys a query may attend to (what the mask allows, whatever the kernel computes)."""
    positions = torch.arange(length)
    offset = positions[:, None] - positions[None, :]  # query - key
    allowed = torch.ones(length, length, dtype=torch.bool)
    if causal:
        allowed &= offset >= 0
    if window is not None:
        allowed &= (offset >= 0) & (offset < window) if causal else offset.abs() <= window // 2
    return float(allowed.sum()) / length


def attention_flops(batch: int, length: int, d_model: int, causal: bool = False,
                    window: int | None = None) -> dict[str, float]:
    """Matmul FLOPs of one self-attention layer (2 per multiply-add; softmax, scaling, masking not counted).

    forward = Q,K,V and output projections 2·B·T·D·4D, plus QKᵀ and (weights)V, 2·B·T·K·D each with K keys
    per query. ``forward``/``training`` count K = T: what both backends execute, since neither skips masked
    scores (GPU flash with ``is_causal`` alone skips the upper triangle; our measurements with an explicit
    window mask never do). ``useful_forward`` counts only the keys the mask allows. Training (forward +
    backward) is 3 × forward: backward computes two matmuls per forward matmul (input and weight gradients).
    """
    projections = 2 * batch * length * d_model * 4 * d_model
    scores_and_mix = lambda keys: 2 * 2 * batch * length * keys * d_model  # noqa: E731
    forward = projections + scores_and_mix(length)
    useful = projections + scores_and_mix(attended_keys(length, causal, window))
    return {"forward": float(forward), "training": 3.0 * forward, "useful_forward": float(useful)}


# ---- one layer: time, memory, agreement ---------------------------------------------------------------------
def _layer(settings: AttentionSettings, backend: str, device: torch.device) -> MultiHeadAttention:
    torch.manual_seed(0)  # the same weights for every variant
    return MultiHeadAttention(settings.d_model, settings.n_heads, settings.dropout, backend).to(device).train()


def _mask(settings: AttentionSettings, length: int, windowed: bool, device: torch.device) -> torch.Tensor | None:
    if not windowed:
        return None
    return sliding_window_mask(length, length, settings.window, causal=settings.causal, device=device)


def bench_point(settings: AttentionSettings, variant: Variant, batch: int, length: int, device: torch.device,
                precision: str) -> dict[str, Any]:
    """Forward+backward time and peak memory of one attention layer on a (batch, length, d_model) input."""
    layer = _layer(settings, variant.backend, device)
    generator = torch.Generator().manual_seed(1)
    x = torch.randn(batch, length, settings.d_model, generator=generator).to(device).requires_grad_(True)
    grad = torch.randn(batch, length, settings.d_model, generator=generator).to(device)
    mask = _mask(settings, length, variant.windowed, device)

    def step() -> None:
        with autocast(device, precision):
            out, _ = layer(x, mask=mask, is_causal=settings.causal)
        out.backward(grad.to(out.dtype))
        x.grad = None
        layer.zero_grad(set_to_none=True)

    timing = time_call(step, device, settings.warmup, settings.repeats, settings.max_seconds)
    free_memory(device)
    live = tensor_bytes(x, grad, mask, *layer.parameters())
    with track_peak_memory(device, live_at_start=live) as peak:
        step()
    flops = attention_flops(batch, length, settings.d_model, settings.causal,
                            settings.window if variant.windowed else None)
    seconds = timing.median
    return {"variant": variant.name, "batch_size": batch, "length": length, "status": "ok",
            "seconds": seconds, "all_seconds": timing.seconds, "peak_memory": peak.peak,
            "extra_memory": peak.above_start, "score_matrix_bytes": batch * settings.n_heads * length**2 * 4,
            "flops": flops["training"], "useful_flops": 3 * flops["useful_forward"],
            "tflops_per_s": flops["training"] / seconds / 1e12}


def backend_agreement(settings: AttentionSettings, batch: int, length: int, windowed: bool,
                      device: torch.device) -> dict[str, float]:
    """Max |standard − sdpa| of the outputs and of the input gradients: same weights, same input, fp32, no
    dropout (eval mode), so any difference is floating-point rounding."""
    layer = _layer(settings, "standard", device).eval()
    generator = torch.Generator().manual_seed(2)
    x = torch.randn(batch, length, settings.d_model, generator=generator).to(device)
    grad = torch.randn(batch, length, settings.d_model, generator=generator).to(device)
    mask = _mask(settings, length, windowed, device)
    outputs = {}
    for backend in ("standard", "sdpa"):
        layer.backend = backend  # the module looks its backend up at every call
        xb = x.clone().requires_grad_(True)
        out, _ = layer(xb, mask=mask, is_causal=settings.causal)
        out.backward(grad)
        outputs[backend] = (out.detach(), xb.grad)
    (out_a, grad_a), (out_b, grad_b) = outputs["standard"], outputs["sdpa"]
    return {"batch_size": batch, "length": length, "windowed": windowed,
            "max_abs_diff_output": float((out_a - out_b).abs().max()),
            "max_abs_diff_input_grad": float((grad_a - grad_b).abs().max()),
            "output_scale": float(out_a.abs().max())}


def counted_flops(settings: AttentionSettings, batch: int, length: int, device: torch.device) -> dict[str, float]:
    """FLOPs of a standard-backend forward+backward as torch.utils.flop_counter counts them, beside the formula.

    The standard backend is counted because it is made of plain matmuls; the counter has no formula for
    the CPU flash kernel.
    """
    from torch.utils.flop_counter import FlopCounterMode

    layer = _layer(settings, "standard", device).eval()
    x = torch.randn(batch, length, settings.d_model, device=device, requires_grad=True)
    with FlopCounterMode(display=False) as counter:
        out, _ = layer(x, is_causal=settings.causal)
        out.sum().backward()
    return {"batch_size": batch, "length": length, "counted": float(counter.get_total_flops()),
            "analytic": attention_flops(batch, length, settings.d_model, settings.causal)["training"]}


def run_microbenchmark(settings: AttentionSettings, device: torch.device, precision: str) -> list[dict[str, Any]]:
    """Every variant × batch × length, skipping lengths that the time cap or the memory guard rule out."""
    points = []
    for variant in VARIANTS:
        for batch in settings.batch_sizes:
            previous: dict[str, Any] | None = None
            skip_reason = None
            for length in settings.lengths:
                skip_reason = skip_reason or _skip(settings, variant, batch, length, previous, device)
                if skip_reason:
                    points.append({"variant": variant.name, "batch_size": batch, "length": length,
                                   "status": skip_reason})
                    continue
                point, out_of_memory = unless_out_of_memory(
                    lambda: bench_point(settings, variant, batch, length, device, precision), device)
                if out_of_memory:
                    skip_reason = "out of memory"
                    points.append({"variant": variant.name, "batch_size": batch, "length": length,
                                   "status": skip_reason})
                    continue
                points.append(point)
                previous = point
                log(f"  {variant.name:>16} B={batch:<3} T={length:<6} {1000 * point['seconds']:10.2f} ms  "
                    f"{point['extra_memory'] / MiB:10.1f} MiB")
    return points


def _skip(settings: AttentionSettings, variant: Variant, batch: int, length: int, previous: dict | None,
          device: torch.device) -> str | None:
    """Why this point is not measured, or None. Time grows at most with the square of the length; the
    memory guard keeps a CPU run from pushing the machine into swap (CUDA reports OOM by itself)."""
    if previous is not None:
        predicted = previous["seconds"] * (length / previous["length"]) ** 2
        if predicted * (settings.warmup + 1) > settings.max_seconds:
            return f"skipped: predicted {predicted:.1f} s per step exceeds the {settings.max_seconds:g} s cap"
    materialises = variant.backend == "standard" or settings.dropout > 0  # CPU SDPA + dropout: math fallback
    if device.type == "cpu" and materialises:
        available = available_ram_bytes()
        scores = batch * settings.n_heads * length**2 * 4
        if available is not None and 4 * scores > available / 2:  # softmax, mask, dropped copy, gradient
            return "skipped: the B·H·T² tensors would not fit in half the free RAM"
    return None


# ---- the whole model: one training step per variant ---------------------------------------------------------
def model_steps(settings: AttentionSettings, device: torch.device, precision: str) -> list[dict[str, Any]]:
    rows = []
    for length in settings.model_lengths:
        batch_size = max(1, settings.model_tokens // length)
        for variant in VARIANTS:
            base = ModelConfig.preset(settings.model_preset)
            config = dataclasses.replace(base, attention=variant.backend, max_len=max(base.max_len, length),
                                         sliding_window=settings.window if variant.windowed else None)
            row = {"variant": variant.name, "length": length, "batch_size": batch_size}
            measured, out_of_memory = unless_out_of_memory(
                lambda: _model_step(config, batch_size, length, settings, device, precision), device)
            row.update({"status": "out of memory"} if out_of_memory else measured)
            free_memory(device)  # the step's model and optimizer are gone now; return their GPU blocks
            rows.append(row)
            if "seconds" in row:
                log(f"  model {variant.name:>16} {batch_size}×{length}: {1000 * row['seconds']:9.1f} ms/step, "
                    f"peak {row['peak_memory'] / MiB:8.1f} MiB")
    return rows


def _model_step(config: ModelConfig, batch_size: int, length: int, settings: AttentionSettings,
                device: torch.device, precision: str) -> dict[str, Any]:
    step = TrainingStep(config, device, precision)
    batch = synthetic_batch(config.vocab_size, batch_size, length, length, device)
    timing = time_call(lambda: step(batch), device, max(settings.warmup, 1), settings.repeats, settings.max_seconds)
    peak = step.peak_memory(batch)
    return {"status": "ok", "seconds": timing.median, "tokens_per_s": batch_size * length / timing.median,
            "peak_memory": peak.peak, "parameters": sum(p.numel() for p in step.model.parameters())}


# ---- the same training run with each variant ----------------------------------------------------------------
class UpdateTimer(Callback):
    """Times every update of a Trainer, synchronised with the device; the update numbered ``profile_update``
    (0-based) is instead run under the CPU memory profiler and left out of the timing."""

    def __init__(self, device: torch.device, profile_update: int | None = None):
        self.device, self.profile_update = device, profile_update
        self.seconds: list[float] = []
        self.peak_memory: int | None = None
        self.updates_seen = 0
        self._profiling: contextlib.ExitStack | None = None
        self._peak: PeakMemory | None = None

    def on_update_start(self, trainer: Trainer) -> None:
        if self.updates_seen == self.profile_update:
            self._profiling = contextlib.ExitStack()
            live = training_state_bytes(trainer.model, trainer.optimizer)
            self._peak = self._profiling.enter_context(track_peak_memory(self.device, live_at_start=live))
        sync(self.device)
        self._start = time.perf_counter()

    def on_update_end(self, trainer: Trainer, result: StepResult) -> None:
        sync(self.device)
        elapsed = time.perf_counter() - self._start
        if self._profiling is not None:
            self._profiling.close()
            self._profiling = None
            self.peak_memory = self._peak.peak
        else:
            self.seconds.append(elapsed)
        self.updates_seen += 1


def training_comparison(settings: AttentionSettings, device: torch.device) -> list[dict[str, Any]]:
    rows = []
    for name in TRAINING_VARIANTS:
        rows.append(_train_variant(settings, name, device))
        free_memory(device)  # the previous run's trainer must not count in the next run's peak
    return rows


def _train_variant(settings: AttentionSettings, name: str, device: torch.device) -> dict[str, Any]:
    """Train ``settings.train_preset`` for ``train_steps`` updates with one attention variant.

    The Trainer runs unchanged; an :class:`UpdateTimer` callback times every update (synchronised) and, on CPU,
    measures the memory of the second one with the profiler (the first creates the AdamW moments). That profiled
    update is left out of the timing because the profiler slows it down.
    """
    from vaswani.training.config import apply_settings, load_preset
    from vaswani.training.metrics import read_metrics

    variant = next(v for v in VARIANTS if v.name == name.split(",")[0])
    steps = settings.train_steps
    base = apply_settings(load_preset(settings.train_preset), settings.train_settings)
    seed = base.train.seed + (1 if name == SEED_NOISE_VARIANT else 0)
    bleu_sentences = 16 if settings.smoke else TRAINING_BLEU_SENTENCES
    overrides = [f"train.max_steps={steps}", "train.max_epochs=null", "train.eval_every_steps=null",
                 f"train.bleu_subset={bleu_sentences}", f"train.seed={seed}", "train.patience=null",
                 "train.progress=false", "train.save_every_steps=null",
                 f"train.log_every_steps={steps}", "train.keep_checkpoints=1", f"train.device={device.type}",
                 f"model.attention={variant.backend}",
                 f"model.sliding_window={settings.window if variant.windowed else 'none'}", *settings.train_settings]
    config = apply_settings(load_preset(settings.train_preset), overrides)
    if settings.data_dir:
        config.data.data_dir = settings.data_dir
    log(f"  training {settings.train_preset} with attention {name} for {steps} steps")
    with tempfile.TemporaryDirectory(prefix=f"attention-{name}-") as run_dir:
        timer = UpdateTimer(device, profile_update=1 if device.type == "cpu" else None)
        trainer = Trainer(config, Path(run_dir), callbacks=[timer])
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(device)
        start = time.perf_counter()
        summary = trainer.fit()
        total = time.perf_counter() - start
        peak = torch.cuda.max_memory_allocated(device) if device.type == "cuda" else timer.peak_memory
        times = timer.seconds
        valid = [r for r in read_metrics(Path(run_dir) / "metrics.jsonl") if r["kind"] == "valid"]
        parameters = trainer.model.num_parameters()
    timed = times[1:] if len(times) > 1 else times  # the first update also warms up kernels and the allocator
    return {"variant": name, "steps": summary["step"], "stop_reason": summary["stop_reason"],
            "seconds_per_batch": sum(timed) / len(timed) if timed else None, "update_seconds": times,
            "total_seconds": total, "peak_memory": peak, "parameters": parameters,
            "final_val_loss": valid[-1]["loss"] if valid else None,
            "final_val_nll": valid[-1]["nll"] if valid else None,
            "final_val_bleu": valid[-1].get("bleu") if valid else None, "bleu_sentences": bleu_sentences,
            "seed": seed}


# ---- the experiment -----------------------------------------------------------------------------------------
def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--lengths", type=ranged(int, ge=1), nargs="+", default=None,
                        help="sequence lengths (default CPU 64..2048, GPU 64..16384)")
    parser.add_argument("--batch-sizes", type=ranged(int, ge=1), nargs="+", default=None,
                        help="batch sizes (default CPU 1 8, GPU 1 8 32)")
    parser.add_argument("--d-model", type=ranged(int, ge=1), default=None,
                        help="model width of the layer (default 512)")
    parser.add_argument("--heads", type=ranged(int, ge=1), default=None, help="attention heads (default 8)")
    parser.add_argument("--window", type=ranged(int, ge=1), default=DEFAULT_SLIDING_WINDOW,
                        help="sliding window k (default %(default)s)")
    parser.add_argument("--causal", action="store_true",
                        help="decoder self-attention (causal) instead of the encoder's bidirectional form")
    parser.add_argument("--dropout", type=ranged(float, ge=0, lt=1), default=0.0,
                        help="attention dropout in the microbenchmark (default 0: the CPU fused kernel is eligible)")
    parser.add_argument("--max-seconds", type=ranged(float, gt=0), default=None,
                        help="time cap per point in seconds (default CPU 20, GPU 10); longer lengths are skipped "
                        "once the cap would be exceeded")
    parser.add_argument("--repeats", type=ranged(int, ge=1), default=None,
                        help="timed repeats per point, median reported (default CPU 3, GPU 10)")
    parser.add_argument("--model-preset", default=None, help="model preset of the whole-model step (default small)")
    parser.add_argument("--model-lengths", type=ranged(int, ge=1), nargs="+", default=None,
                        help="sentence lengths of the whole-model step (default CPU 32 128 512, GPU also 2048)")
    parser.add_argument("--model-tokens", type=ranged(int, ge=1), default=None,
                        help="tokens per batch of the whole-model step (default CPU 1024, GPU 8192)")
    parser.add_argument("--train-steps", type=ranged(int, ge=0), default=0,
                        help="also train --train-preset for N updates with standard, sdpa and sdpa+window "
                        "(default 0: no training)")
    parser.add_argument("--train-preset", default=None,
                        help="run preset of the training comparison (default multi30k-cpu / multi30k-gpu; "
                        "smoke with --smoke)")
    parser.add_argument("--train-set", dest="train_settings", action="append", default=[], metavar="SECTION.KEY=VALUE",
                        help="extra settings for the training comparison, e.g. --train-set model.dropout=0")
    add_data_dir_argument(parser)
    parser.add_argument("--precision", default="auto", choices=PRECISIONS,
                        help="auto (default): bf16 on GPUs, fp32 on CPUs without fast bf16")


def resolve_settings(args: argparse.Namespace, device: torch.device) -> AttentionSettings:
    defaults = SMOKE if args.smoke else (GPU_DEFAULTS if device.type == "cuda" else CPU_DEFAULTS)

    def pick(name: str, attribute: str | None = None) -> Any:
        value = getattr(args, attribute or name)
        return defaults[name] if value is None else value

    return AttentionSettings(
        d_model=pick("d_model"), n_heads=pick("n_heads", "heads"), lengths=sorted(pick("lengths")),
        batch_sizes=list(pick("batch_sizes")), window=args.window, causal=bool(args.causal), dropout=args.dropout,
        warmup=defaults["warmup"], repeats=pick("repeats"), max_seconds=pick("max_seconds"),
        agreement_max_length=defaults["agreement_max_length"], model_preset=pick("model_preset"),
        model_lengths=list(pick("model_lengths")), model_tokens=pick("model_tokens"),
        train_steps=args.train_steps, train_preset=pick("train_preset"), train_settings=list(args.train_settings),
        data_dir=str(args.data_dir) if args.data_dir else None, precision=resolve_precision(args.precision, device),
        smoke=bool(args.smoke))


def run(args: argparse.Namespace) -> int:
    from vaswani.devices import resolve_device

    device = resolve_device(args.device)
    settings = resolve_settings(args, device)
    precision = settings.precision
    log(f"attention: d_model {settings.d_model}, {settings.n_heads} heads, {precision} on {device_label(device)}")
    points = run_microbenchmark(settings, device, precision)
    agreement = [backend_agreement(settings, settings.batch_sizes[0], length, windowed, device)
                 for windowed in (False, True) for length in settings.lengths
                 if length <= max(settings.agreement_max_length, settings.lengths[0])]
    flop_check = counted_flops(settings, settings.batch_sizes[0], settings.lengths[0], device)
    model_rows = model_steps(settings, device, precision)
    training = training_comparison(settings, device) if settings.train_steps > 0 else []

    results = {"device": device_label(device), "precision": precision, "microbenchmark": points,
               "agreement": agreement, "max_abs_diff_output": max(a["max_abs_diff_output"] for a in agreement),
               "max_abs_diff_input_grad": max(a["max_abs_diff_input_grad"] for a in agreement),
               "flop_counter_check": flop_check, "model_step": model_rows, "training": training,
               "memory_method": _memory_method(device)}
    if training:
        losses = {r["variant"]: r["final_val_loss"] for r in training}
        results["val_loss_gap_standard_vs_sdpa"] = _gap(losses.get("standard"), losses.get("sdpa"))
        results["val_loss_gap_window_vs_sdpa"] = _gap(losses.get("sdpa+window"), losses.get("sdpa"))
        results["val_loss_gap_seed"] = _gap(losses.get(SEED_NOISE_VARIANT), losses.get("sdpa"))
    table = _table(settings, results, device, args.command_line)
    figures = {"time_vs_length": _plot(points, settings, "seconds", "forward+backward time (s)", device, precision),
               "memory_vs_length": _plot(points, settings, "extra_memory", "peak memory above inputs (MiB)", device,
                                         precision)}
    readme = "\n".join(["# Attention backends: what this run shows", "",
                         *[f"- {line}" for line in findings(results, settings, device)], "",
                         "Numbers and method: [table.md](table.md); raw values: results.json."])
    write_results(args.out, "attention", args.command_line, device, dataclasses.asdict(settings), results, table,
                  figures, readme=readme)
    _print_summary(results, args.out)
    return 0


def _gap(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else abs(a - b)


def _memory_method(device: torch.device) -> str:
    from vaswani.experiments.common import CPU_METHOD, CUDA_METHOD

    return CUDA_METHOD if device.type == "cuda" else CPU_METHOD


def _table(settings: AttentionSettings, results: dict[str, Any], device: torch.device, command: str) -> str:
    points = results["microbenchmark"]
    kind = "causal (decoder) self-attention" if settings.causal else "bidirectional (encoder) self-attention"
    lines = [
        f"# Attention backends: time, memory, FLOPs ({settings.d_model} wide, {settings.n_heads} heads)",
        "",
        provenance_line(device, command),
        "",
        f"One `MultiHeadAttention` layer, {kind}, {results['precision']}, dropout {settings.dropout}, forward + "
        f"backward; window k = {settings.window}. Time: median of up to {settings.repeats} synchronised runs after "
        f"{settings.warmup} warm-up. Memory: {_memory_label(device)} — peak above the inputs and weights. "
        "FLOPs: analytic training FLOPs (3 × forward matmuls) as executed, i.e. all T² scores; *useful* counts "
        "only the scores the window allows.",
        "",
    ]
    for batch in settings.batch_sizes:
        lines += [f"## Batch size {batch}", "", _micro_table(points, settings, batch), ""]
    skipped = sorted({p["status"] for p in points if p["status"] != "ok"})
    if skipped:
        lines += ["Not measured (–): " + "; ".join(skipped) + ".", ""]
    lines += _agreement_lines(results, settings)
    lines += _model_lines(results["model_step"], settings, device)
    if results["training"]:
        lines += _training_lines(results, settings)
    lines += ["## How memory was measured", "", results["memory_method"] + ".",
              "The analytic size of one fp32 B·H·T² score matrix is given beside it: the standard backend keeps "
              "about three of them for backward (softmax output, and with dropout its mask and the dropped copy).",
              ""]
    return "\n".join(lines)


def _memory_label(device: torch.device) -> str:
    if device.type == "cuda":
        return "`torch.cuda.max_memory_allocated`"
    return "CPU allocations replayed from torch.profiler"


def _micro_table(points: list[dict], settings: AttentionSettings, batch: int) -> str:
    headers = ["T", "GFLOP (executed)", "GFLOP (useful, window)", "B·H·T² fp32 (MiB)"]
    for variant in VARIANTS:
        headers += [f"{variant.name} ms", f"{variant.name} MiB"]
    rows = []
    for length in settings.lengths:
        flops = attention_flops(batch, length, settings.d_model, settings.causal)["training"]
        windowed = attention_flops(batch, length, settings.d_model, settings.causal, settings.window)
        useful = 3 * windowed["useful_forward"]
        row: list[Any] = [length, flops / 1e9, useful / 1e9, batch * settings.n_heads * length**2 * 4 / MiB]
        for variant in VARIANTS:
            point = next((p for p in points if p["variant"] == variant.name and p["batch_size"] == batch
                          and p["length"] == length), None)
            ok = point is not None and point["status"] == "ok"
            row += [1000 * point["seconds"] if ok else None, point["extra_memory"] / MiB if ok else None]
        rows.append(row)
    return markdown_table(headers, rows)


def _agreement_lines(results: dict[str, Any], settings: AttentionSettings) -> list[str]:
    check = results["flop_counter_check"]
    lines = [
        "## The exact backends compute the same function",
        "",
        "`standard` and `sdpa` are two implementations of softmax(QKᵀ/√d)V: same weights and input, fp32, "
        "no dropout. Max |difference| over every length up to "
        f"{settings.agreement_max_length} (batch {settings.batch_sizes[0]}): outputs "
        f"**{results['max_abs_diff_output']:.2e}**, input gradients **{results['max_abs_diff_input_grad']:.2e}**, "
        "with and without the sliding window (a different function: each backend pair is compared on the same "
        "window).",
        "",
        markdown_table(["T", "window", "max abs Δ output", "max abs Δ input grad", "max abs output"],
                       [[a["length"], "yes" if a["windowed"] else "no", f"{a['max_abs_diff_output']:.1e}",
                         f"{a['max_abs_diff_input_grad']:.1e}", a["output_scale"]] for a in results["agreement"]]),
        "",
        f"FLOP formula check: `torch.utils.flop_counter` counts {check['counted']:,.0f} FLOPs for a standard-backend "
        f"forward+backward at B={check['batch_size']}, T={check['length']}; the formula gives "
        f"{check['analytic']:,.0f}.",
        "",
    ]
    return lines


def _model_lines(rows: list[dict], settings: AttentionSettings, device: torch.device) -> list[str]:
    headers = ["batch × length", *[f"{v.name} ms/step" for v in VARIANTS], *[f"{v.name} MiB" for v in VARIANTS]]
    body = []
    for length in settings.model_lengths:
        mine = {r["variant"]: r for r in rows if r["length"] == length}
        ok = lambda r: r is not None and r.get("status") == "ok"  # noqa: E731
        first = next(iter(mine.values()))
        body.append([f"{first['batch_size']} × {length}",
                     *[1000 * mine[v.name]["seconds"] if ok(mine.get(v.name)) else None for v in VARIANTS],
                     *[mine[v.name]["peak_memory"] / MiB if ok(mine.get(v.name)) else None for v in VARIANTS]])
    dropout = ModelConfig.preset(settings.model_preset).dropout
    notes = [
        f"Encoder-decoder, AdamW, label-smoothed loss, dropout {dropout}, ~{settings.model_tokens:,} tokens per batch "
        "of equal-length sentences (source = target length); the window applies to encoder and decoder "
        f"self-attention. It only removes keys from sentences longer than {settings.window // 2 + 1} tokens in the "
        f"encoder (|i − j| ≤ {settings.window // 2}) and {settings.window} in the decoder (the last "
        f"{settings.window} positions); below that it changes nothing but the cost of building the mask."]
    if device.type == "cpu" and dropout > 0:
        notes.append("On CPU, PyTorch's fused SDPA kernel does not implement dropout, so in training (dropout > 0) "
                     "`sdpa` falls back to the math implementation, which materialises the B·H·T² scores like "
                     "`standard`: expect the same memory here, unlike on a GPU.")
    return [f"## Whole model: one training step (`{settings.model_preset}` preset)", "", " ".join(notes), "",
            markdown_table(headers, body), ""]


def _training_lines(results: dict[str, Any], settings: AttentionSettings) -> list[str]:
    rows = results["training"]
    body = [[r["variant"], r["steps"], None if r["seconds_per_batch"] is None else 1000 * r["seconds_per_batch"],
             r["total_seconds"], None if r["peak_memory"] is None else r["peak_memory"] / MiB,
             None if r["final_val_loss"] is None else f"{r['final_val_loss']:.5f}", r.get("final_val_bleu")]
            for r in rows]
    gap = results.get("val_loss_gap_standard_vs_sdpa")
    seed_gap = results.get("val_loss_gap_seed")
    extra = f" with {' '.join(settings.train_settings)}" if settings.train_settings else ""
    return [
        f"## Training: the same run with each backend (`{settings.train_preset}`{extra}, "
        f"{settings.train_steps} updates)",
        "",
        markdown_table(["attention", "updates", "ms per batch", "total (s)", "peak memory (MiB)", "final val loss",
                        f"val BLEU ({rows[0].get('bleu_sentences')} sent., greedy)"], body),
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


def findings(results: dict[str, Any], settings: AttentionSettings, device: torch.device) -> list[str]:
    """The conclusions of one run, each sentence chosen by comparing its numbers (written to README.md)."""
    lines = []
    scale = max(a["output_scale"] for a in results["agreement"])
    difference = results["max_abs_diff_output"]
    if difference <= ROUNDING * max(scale, 1.0):
        lines.append(f"`standard` and `sdpa` agree to {difference:.1e} (outputs of size ~{scale:.2f}): floating-point "
                     "rounding from summing in different orders, not a different function.")
    else:
        lines.append(f"`standard` and `sdpa` differ by {difference:.1e} (outputs of size ~{scale:.2f}): more than "
                     "fp32 rounding — the backends do not compute the same function here.")
    points = [p for p in results["microbenchmark"] if p["status"] == "ok" and p["batch_size"] == 1]
    both = sorted({p["length"] for p in points if p["variant"] == "standard"}
                  & {p["length"] for p in points if p["variant"] == "sdpa"})
    if both:
        length = CLAIM_LENGTH if CLAIM_LENGTH in both else both[-1]
        pick = {p["variant"]: p for p in points if p["length"] == length}
        memory = pick["standard"]["extra_memory"] / max(pick["sdpa"]["extra_memory"], 1)
        speed = pick["standard"]["seconds"] / pick["sdpa"]["seconds"]
        where = f"T = {length}" + ("" if length == CLAIM_LENGTH else " (the longest length both backends ran)")
        lines.append(
            f"At {where}, batch 1, `sdpa` needs {memory:.1f}× less memory than `standard` and runs {speed:.2f}× as "
            f"fast on {device.type}. The claim's memory half (≥ {CLAIM_MEMORY_RATIO:g}× less at T = {CLAIM_LENGTH}) "
            + ("holds" if memory >= CLAIM_MEMORY_RATIO else "does not hold")
            + f" here; its speed half (≥ {CLAIM_SPEEDUP:g}× faster) "
            + ("holds." if speed >= CLAIM_SPEEDUP else "does not."))
    gap, seed_gap = results.get("val_loss_gap_standard_vs_sdpa"), results.get("val_loss_gap_seed")
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
    window_gap = results.get("val_loss_gap_window_vs_sdpa")
    if window_gap is not None and seed_gap is not None:
        acts = window_gap > seed_gap / 3
        lines.append(f"The window k = {settings.window} moves the final validation loss by {window_gap:.1e} against "
                     f"{seed_gap:.1e} between seeds: " + ("it changes what is learned at this length." if acts else
                     "it barely acts on this corpus, whose sentences are mostly shorter than the window."))
    return lines


def _plot(points: list[dict], settings: AttentionSettings, key: str, label: str, device: torch.device,
          precision: str) -> Any:
    plt = pyplot()
    figure, axis = plt.subplots(figsize=(7, 5))
    styles = ["-", "--", ":", "-."]
    colors = plt.get_cmap("tab10").colors
    for vi, variant in enumerate(VARIANTS):
        for bi, batch in enumerate(settings.batch_sizes):
            mine = [p for p in points if p["variant"] == variant.name and p["batch_size"] == batch
                    and p["status"] == "ok"]
            if not mine:
                continue
            values = [p[key] / (MiB if key != "seconds" else 1) for p in mine]
            axis.plot([p["length"] for p in mine], [max(v, 1e-9) for v in values], styles[bi % len(styles)],
                      marker="o", color=colors[vi], label=f"{variant.name}, B={batch}")
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


def _print_summary(results: dict[str, Any], out: Path) -> None:
    measured = [p for p in results["microbenchmark"] if p["status"] == "ok"]
    print(f"attention: {len(measured)} points measured on {results['device']} ({results['precision']})")
    longest = max((p["length"] for p in measured), default=0)
    for p in measured:
        if p["length"] == longest:
            print(f"  T={p['length']} B={p['batch_size']} {p['variant']:>16}: {1000 * p['seconds']:.2f} ms, "
                  f"{p['extra_memory'] / MiB:.1f} MiB")
    print(f"max |standard - sdpa|: output {results['max_abs_diff_output']:.2e}, "
          f"input grad {results['max_abs_diff_input_grad']:.2e}")
    for r in results["training"]:
        loss = r["final_val_loss"]
        per_batch = r["seconds_per_batch"]
        print(f"  train {r['variant']:>12}: {r['steps']} steps, "
              + (f"{1000 * per_batch:.1f} ms/batch, " if per_batch is not None else "")
              + f"total {r['total_seconds']:.1f} s, val loss " + (f"{loss:.4f}" if loss is not None else "–"))
    print(f"results in {out}")
