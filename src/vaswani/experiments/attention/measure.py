"""The measurements of `vaswani experiment attention`: one attention layer per variant, batch size and length
(time, peak memory, FLOPs), the window k against memory, the backends' agreement, a whole-model training step per
variant, and the same training run with each variant. Everything here computes and hands the records of
``results`` on; ``report`` writes them down."""

from __future__ import annotations

import contextlib
import dataclasses
import tempfile
import time
from pathlib import Path

import torch

from vaswani.config import ModelConfig
from vaswani.devices import synchronize as sync
from vaswani.experiments.attention.results import (
    AttentionResults,
    BackendAgreement,
    FlopCheck,
    LayerPoint,
    ModelStep,
    TrainingRun,
)
from vaswani.experiments.attention.settings import (
    SEED_NOISE_VARIANT,
    TRAINING_BLEU_SENTENCES,
    TRAINING_VARIANTS,
    VARIANTS,
    AttentionSettings,
    AttentionVariant,
    variant,
)
from vaswani.experiments.measurement import (
    MiB,
    PeakMemory,
    TrainingStep,
    available_ram_bytes,
    free_memory,
    memory_method,
    synthetic_batch,
    tensor_bytes,
    time_call,
    track_peak_memory,
    training_state_bytes,
    unless_out_of_memory,
)
from vaswani.experiments.reporting import device_label, log
from vaswani.model.attention import MultiHeadAttention
from vaswani.model.masks import causal_mask, sliding_window_mask
from vaswani.model.window import window_block
from vaswani.precision import autocast
from vaswani.training.callbacks import Callback
from vaswani.training.data import settle
from vaswani.training.flops import self_attention_flops
from vaswani.training.metrics import read_metrics
from vaswani.training.presets import apply_settings, load_preset
from vaswani.training.step import DeferredStepResult, StepResult
from vaswani.training.trainer import Trainer


# ---- one layer: FLOPs, time, memory, agreement -----------------------------------------------------------------
def layer_training_flops(settings: AttentionSettings, batch: int, length: int, window: int | None = None) -> float:
    """Forward + backward FLOPs of the layer by the project's one rule (``training.flops``): the projections and
    the scores the masks allow, whatever the kernel executes."""
    return 3.0 * batch * self_attention_flops(settings.d_model, length, settings.causal, window)


def _layer(settings: AttentionSettings, backend: str, device: torch.device,
           window: int | None = None) -> MultiHeadAttention:
    torch.manual_seed(0)  # the same weights for every variant
    layer = MultiHeadAttention(settings.d_model, settings.n_heads, settings.dropout, backend, window=window)
    return layer.to(device).train()


def bench_point(settings: AttentionSettings, name: str, backend: str, window: int | None, batch: int,
                length: int, device: torch.device, precision: str) -> LayerPoint:
    """Forward+backward time and peak memory of one attention layer on a (batch, length, d_model) input, as
    the point of the variant ``name``."""
    layer = _layer(settings, backend, device, window)
    generator = torch.Generator().manual_seed(1)
    x = torch.randn(batch, length, settings.d_model, generator=generator).to(device).requires_grad_(True)
    grad = torch.randn(batch, length, settings.d_model, generator=generator).to(device)

    def step() -> None:
        with autocast(device, precision):
            out = layer(x, is_causal=settings.causal)
        out.backward(grad.to(out.dtype))
        x.grad = None
        layer.zero_grad(set_to_none=True)

    timing = time_call(step, device, settings.warmup, settings.repeats, settings.max_seconds)
    free_memory(device)
    with track_peak_memory(device, live_at_start=tensor_bytes(x, grad, *layer.parameters())) as peak:
        step()
    flops = layer_training_flops(settings, batch, length, window)
    return LayerPoint(name, backend, batch, length, window, "ok", seconds=timing.median,
                      all_seconds=timing.seconds, peak_memory=peak.peak, extra_memory=peak.above_start,
                      score_matrix_bytes=batch * settings.n_heads * length**2 * 4, flops=flops,
                      tflops_per_s=flops / timing.median / 1e12)


def backend_agreement(settings: AttentionSettings, batch: int, length: int, windowed: bool,
                      device: torch.device) -> BackendAgreement:
    """Max |standard − sdpa| of the outputs and of the input gradients: same weights, same input, fp32, no
    dropout (eval mode), so any difference is floating-point rounding. With the window, also how far the blocked
    window is from the same layer given the full (T, T) band mask."""
    window = settings.window if windowed else None
    layer = _layer(settings, "standard", device, window).eval()
    generator = torch.Generator().manual_seed(2)
    x = torch.randn(batch, length, settings.d_model, generator=generator).to(device)
    grad = torch.randn(batch, length, settings.d_model, generator=generator).to(device)

    def output_and_input_grad(backend: str, mask: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        layer.backend = backend  # the module looks its backend up at every call
        xb = x.clone().requires_grad_(True)
        out = layer(xb, mask=mask, is_causal=settings.causal)
        out.backward(grad)
        return out.detach(), xb.grad

    (out_a, grad_a), (out_b, grad_b) = output_and_input_grad("standard"), output_and_input_grad("sdpa")
    row = BackendAgreement(batch, length, windowed, max_abs_diff_output=float((out_a - out_b).abs().max()),
                           max_abs_diff_input_grad=float((grad_a - grad_b).abs().max()),
                           output_scale=float(out_a.abs().max()))
    if windowed:
        layer.window = None
        band = sliding_window_mask(length, length, settings.window, settings.causal, device=device)
        out_band, _ = output_and_input_grad("standard", band)
        row.max_abs_diff_band_mask = float((out_a - out_band).abs().max())
    return row


def counted_flops(settings: AttentionSettings, batch: int, length: int, device: torch.device) -> FlopCheck:
    """FLOPs of a standard-backend forward+backward as torch.utils.flop_counter counts them, beside the rule's.

    The written-out backend computes every one of the T² scores and masks those causality forbids: the counter
    sees those too (``masked``), the rule does not. The standard backend is counted because it is made of plain
    matmuls; the counter has no formula for the CPU flash kernel.
    """
    from torch.utils.flop_counter import FlopCounterMode

    layer = _layer(settings, "standard", device).eval()
    x = torch.randn(batch, length, settings.d_model, device=device, requires_grad=True)
    with FlopCounterMode(display=False) as counter:
        out = layer(x, is_causal=settings.causal)
        out.sum().backward()
    allowed = int(causal_mask(length).sum()) if settings.causal else length * length
    masked = 3 * batch * 2 * 2 * settings.d_model * (length * length - allowed)
    return FlopCheck(batch, length, counted=float(counter.get_total_flops()),
                     rule=layer_training_flops(settings, batch, length), masked=float(masked))


def _window_of(settings: AttentionSettings, chosen: AttentionVariant) -> int | None:
    return settings.window if chosen.windowed else None


def run_microbenchmark(settings: AttentionSettings, device: torch.device, precision: str) -> list[LayerPoint]:
    """Every variant × batch × length, skipping lengths that the time cap or the memory guard rule out."""
    points = []
    for chosen in VARIANTS:
        window = _window_of(settings, chosen)
        for batch in settings.batch_sizes:
            points += _series(settings, chosen.name, chosen.backend, window, batch,
                              [(length, window) for length in settings.lengths], device, precision)
    return points


def window_sweep(settings: AttentionSettings, device: torch.device, precision: str) -> list[LayerPoint]:
    """Each backend at one length with every window k, narrowest first, then without a window: memory against k.
    In this order each point costs more than the one before, from which the time cap predicts it."""
    points = []
    batch, length = settings.batch_sizes[0], settings.window_length
    for backend in ("standard", "sdpa"):
        sizes = [(length, window) for window in sorted(settings.windows)] + [(length, None)]
        points += _series(settings, backend, backend, None, batch, sizes, device, precision, sweep=True)
    return points


def _series(settings: AttentionSettings, name: str, backend: str, window: int | None, batch: int,
            sizes: list[tuple[int, int | None]], device: torch.device, precision: str,
            sweep: bool = False) -> list[LayerPoint]:
    """Measure (length, window) points in order; once one is ruled out (time cap, memory guard, out of memory),
    the later ones, which cost more, are reported with the same reason."""
    points: list[LayerPoint] = []
    previous: LayerPoint | None = None
    skip_reason = None
    for length, point_window in sizes:
        window = point_window if sweep else window
        skip_reason = skip_reason or _skip(settings, backend, window, batch, length, previous, device)
        if skip_reason:
            points.append(LayerPoint(name, backend, batch, length, window, skip_reason))
            continue
        point, out_of_memory = unless_out_of_memory(
            lambda: bench_point(settings, name, backend, window, batch, length, device, precision), device)
        if out_of_memory:
            skip_reason = "out of memory"
            points.append(LayerPoint(name, backend, batch, length, window, skip_reason))
            continue
        points.append(point)
        previous = point
        log(f"  {name:>16} B={batch:<3} T={length:<6} k={window or '-':<5} {1000 * point.seconds:10.2f} ms  "
            f"{point.extra_memory / MiB:10.1f} MiB")
    return points


def scores_per_query(length: int, window: int | None, causal: bool) -> int:
    """Scores a layer computes per query: all T without a window, a block's span of keys with one."""
    if window is None:
        return length
    reach = window - 1 if causal else 2 * (window // 2)
    return min(length, window_block(window) + reach)


def _skip(settings: AttentionSettings, backend: str, window: int | None, batch: int, length: int,
          previous: LayerPoint | None, device: torch.device) -> str | None:
    """Why this point is not measured, or None. Time grows at most with the square of the length (or the
    window); the memory guard keeps a CPU run from pushing the machine into swap (CUDA reports OOM by itself)."""
    if previous is not None:
        growth = (length * scores_per_query(length, window, settings.causal)) / (
            previous.length * scores_per_query(previous.length, previous.window, settings.causal))
        predicted = previous.seconds * max(growth, length / previous.length)
        if predicted * (settings.warmup + 1) > settings.max_seconds:
            return f"skipped: predicted {predicted:.1f} s per step exceeds the {settings.max_seconds:g} s cap"
    materialises = backend == "standard" or settings.dropout > 0  # CPU SDPA + dropout: math fallback
    if device.type == "cpu" and materialises:
        available = available_ram_bytes()
        scores = batch * settings.n_heads * length * scores_per_query(length, window, settings.causal) * 4
        if available is not None and 4 * scores > available / 2:  # softmax, mask, dropped copy, gradient
            return "skipped: the score tensors would not fit in half the free RAM"
    return None


# ---- the whole model: one training step per variant ---------------------------------------------------------
def model_steps(settings: AttentionSettings, device: torch.device, precision: str) -> list[ModelStep]:
    rows = []
    for length in settings.model_lengths:
        batch_size = max(1, settings.model_tokens // length)
        for chosen in VARIANTS:
            base = ModelConfig.preset(settings.model_preset)
            config = dataclasses.replace(base, attention=chosen.backend, max_len=max(base.max_len, length),
                                         sliding_window=_window_of(settings, chosen))
            row, out_of_memory = unless_out_of_memory(
                lambda: _model_step(chosen.name, config, batch_size, length, settings, device, precision),
                device)
            if out_of_memory:
                row = ModelStep(chosen.name, length, batch_size, "out of memory")
            free_memory(device)  # the step's model and optimizer are gone now; return their GPU blocks
            rows.append(row)
            if row.ok:
                log(f"  model {chosen.name:>16} {batch_size}×{length}: {1000 * row.seconds:9.1f} ms/step, "
                    f"peak {row.peak_memory / MiB:8.1f} MiB")
    return rows


def _model_step(name: str, config: ModelConfig, batch_size: int, length: int, settings: AttentionSettings,
                device: torch.device, precision: str) -> ModelStep:
    step = TrainingStep(config, device, precision)
    batch = synthetic_batch(config.vocab_size, batch_size, length, length, device)
    timing = time_call(lambda: step(batch), device, max(settings.warmup, 1), settings.repeats, settings.max_seconds)
    peak = step.peak_memory(batch)
    return ModelStep(name, length, batch_size, "ok", seconds=timing.median,
                     tokens_per_s=batch_size * length / timing.median, peak_memory=peak.peak,
                     parameters=sum(p.numel() for p in step.model.parameters()))


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

    def on_update_end(self, trainer: Trainer, result: StepResult | DeferredStepResult) -> None:
        sync(self.device)
        elapsed = time.perf_counter() - self._start
        if self._profiling is not None:
            self._profiling.close()
            self._profiling = None
            self.peak_memory = self._peak.peak
        else:
            self.seconds.append(elapsed)
        self.updates_seen += 1


def training_comparison(settings: AttentionSettings, device: torch.device) -> list[TrainingRun]:
    rows = []
    for name in TRAINING_VARIANTS:
        rows.append(_train_variant(settings, name, device))
        free_memory(device)  # the previous run's trainer must not count in the next run's peak
    return rows


def _train_variant(settings: AttentionSettings, name: str, device: torch.device) -> TrainingRun:
    """Train ``settings.train_preset`` for ``train_steps`` updates with one attention variant.

    The Trainer runs unchanged; an :class:`UpdateTimer` callback times every update (synchronised) and, on CPU,
    measures the memory of the second one with the profiler (the first creates the AdamW moments). That profiled
    update is left out of the timing because the profiler slows it down.
    """
    chosen = variant(name)
    steps = settings.train_steps
    base = apply_settings(load_preset(settings.train_preset), settings.train_settings)
    seed = base.train.seed + (1 if name == SEED_NOISE_VARIANT else 0)
    bleu_sentences = 16 if settings.smoke else TRAINING_BLEU_SENTENCES
    overrides = [f"train.max_steps={steps}", "train.max_epochs=null", "train.eval_every_steps=null",
                 f"train.bleu_subset={bleu_sentences}", f"train.seed={seed}", "train.patience=null",
                 "train.progress=false", "train.save_every_steps=null",
                 f"train.log_every_steps={steps}", "train.keep_checkpoints=1", f"train.device={device.type}",
                 f"model.attention={chosen.backend}",
                 f"model.sliding_window={settings.window if chosen.windowed else 'none'}", *settings.train_settings]
    config = apply_settings(load_preset(settings.train_preset), overrides)
    if settings.data_dir:
        config.data.data_dir = settings.data_dir
    log(f"  training {settings.train_preset} with attention {name} for {steps} steps")
    with tempfile.TemporaryDirectory(prefix=f"attention-{name}-") as run_dir:
        timer = UpdateTimer(device, profile_update=1 if device.type == "cpu" else None)
        config, data = settle(config, Path(run_dir))
        trainer = Trainer(config, Path(run_dir), callbacks=[timer], data=data)
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(device)
        start = time.perf_counter()
        summary = trainer.fit()
        total = time.perf_counter() - start
        peak = torch.cuda.max_memory_allocated(device) if device.type == "cuda" else timer.peak_memory
        times = timer.seconds
        valid = [r for r in read_metrics(Path(run_dir) / "metrics.jsonl") if r.kind == "valid"]
        parameters = trainer.model.num_parameters()
    timed = times[1:] if len(times) > 1 else times  # the first update also warms up kernels and the allocator
    return TrainingRun(name, summary.step, summary.stop_reason.value,
                       seconds_per_batch=sum(timed) / len(timed) if timed else None, update_seconds=times,
                       total_seconds=total, peak_memory=peak, parameters=parameters,
                       final_val_loss=valid[-1].loss if valid else None,
                       final_val_nll=valid[-1].nll if valid else None,
                       final_val_bleu=valid[-1].bleu if valid else None, bleu_sentences=bleu_sentences,
                       seed=seed)


# ---- everything, in one record -----------------------------------------------------------------------------
def _gap(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else abs(a - b)


def measure(settings: AttentionSettings, device: torch.device) -> AttentionResults:
    """Every measurement of one run, as written to results.json."""
    precision = settings.precision
    points = run_microbenchmark(settings, device, precision)
    sweep = window_sweep(settings, device, precision)
    agreement = [backend_agreement(settings, settings.batch_sizes[0], length, windowed, device)
                 for windowed in (False, True) for length in settings.lengths
                 if length <= max(settings.agreement_max_length, settings.lengths[0])]
    flop_check = counted_flops(settings, settings.batch_sizes[0], settings.lengths[0], device)
    model_rows = model_steps(settings, device, precision)
    training = training_comparison(settings, device) if settings.train_steps > 0 else []
    results = AttentionResults(
        device_label(device), precision, points, sweep, agreement,
        max_abs_diff_output=max(a.max_abs_diff_output for a in agreement),
        max_abs_diff_input_grad=max(a.max_abs_diff_input_grad for a in agreement),
        max_abs_diff_band_mask=max(a.max_abs_diff_band_mask for a in agreement if a.windowed),
        flop_counter_check=flop_check, model_step=model_rows, training=training,
        memory_method=memory_method(device))
    if training:
        losses = {r.variant: r.final_val_loss for r in training}
        results.val_loss_gap_standard_vs_sdpa = _gap(losses.get("standard"), losses.get("sdpa"))
        results.val_loss_gap_window_vs_sdpa = _gap(losses.get("sdpa+window"), losses.get("sdpa"))
        results.val_loss_gap_seed = _gap(losses.get(SEED_NOISE_VARIANT), losses.get("sdpa"))
    return results
