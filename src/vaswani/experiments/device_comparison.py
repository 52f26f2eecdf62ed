"""`vaswani experiment devices`: the same training step on CPU and GPU, phase by phase.

Forward (including the loss), backward, and the optimizer step (gradient clipping + AdamW + zeroing) are timed
separately, each bracketed by device synchronisation, over the same batches with the same model, optimizer,
loss and precision on both devices. The epoch time is *extrapolated*: mean step time × the number of steps an
epoch of Multi30k (29,000 pairs) takes at this token budget. Without a GPU only the CPU half runs, and the
results say so.
"""

from __future__ import annotations

import argparse
import dataclasses
import time
from dataclasses import dataclass
from typing import Any

import torch

from vaswani.arguments import add_settings_argument, ranged
from vaswani.benchmarks.train_batches import make_batches, sentence_lengths
from vaswani.config import ModelConfig
from vaswani.devices import synchronize as sync
from vaswani.errors import VaswaniError
from vaswani.experiments.measurement import MiB, TrainingStep, free_memory, preset_model_config
from vaswani.experiments.reporting import device_label, log, markdown_table, provenance_line, pyplot, write_results
from vaswani.model import Transformer
from vaswani.precision import resolve_precision
from vaswani.records import to_json
from vaswani.settings import MAX_BATCH, MAX_COUNT, MAX_THREADS, PRECISIONS
from vaswani.training.presets import load_preset
from vaswani.training.step import TeacherForcedBatch

MULTI30K_TRAIN_PAIRS = 29_000
PHASES = ("forward", "backward", "optimizer", "step")


@dataclass(frozen=True)
class PhaseTimes:
    """What timing the training steps on one device measured: seconds per step of each phase, the target tokens
    the timed steps saw, and the peak memory of one step on the largest batch."""

    seconds: dict[str, list[float]]
    target_tokens: int
    peak_memory: float
    peak_method: str


@dataclass(frozen=True)
class DeviceHalf:
    """One device's side of the comparison (a value of results.json "devices"): the raw times and their means."""

    seconds: dict[str, list[float]]
    target_tokens: int
    peak_memory: float
    peak_method: str
    device: str
    precision: str
    forward_ms: float
    backward_ms: float
    optimizer_ms: float
    step_ms: float
    tokens_per_s: float
    epoch_minutes: float


@dataclass
class DevicesSettings:
    preset: str
    model_settings: list[str]
    max_tokens: int
    steps: int
    warmup: int
    precision: str  # "fp32", "bf16", or "auto" (each device its own best)
    threads: int | None
    smoke: bool


SMOKE = dict(preset="smoke", max_tokens=256, steps=2, warmup=1)
DEFAULTS = dict(preset="multi30k-cpu", max_tokens=None, steps=20, warmup=3)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--preset", default=None,
                        help="run preset giving the model and the token budget (default multi30k-cpu; smoke with "
                        "--smoke); the model's vocabulary is the preset's data.vocab_size")
    add_settings_argument(parser, ("model",), "model.attention=standard")
    parser.add_argument("--max-tokens", type=ranged(int, ge=1, le=MAX_BATCH), default=None,
                        help="token budget per batch (default: the preset's)")
    parser.add_argument("--steps", type=ranged(int, ge=1, le=MAX_COUNT), default=None,
                        help="timed steps per device (default 20)")
    parser.add_argument("--warmup", type=ranged(int, ge=0, le=MAX_COUNT), default=None,
                        help="untimed warm-up steps (default 3)")
    parser.add_argument("--precision", default="fp32", choices=PRECISIONS,
                        help="fp32 (default): the same arithmetic on both devices; 'auto': each device's fastest")
    parser.add_argument("--threads", type=ranged(int, ge=1, le=MAX_THREADS), default=None,
                        help="CPU threads for the CPU half (default: PyTorch's, one per core)")


def resolve_settings(args: argparse.Namespace) -> DevicesSettings:
    defaults = SMOKE if args.smoke else DEFAULTS
    preset = args.preset or defaults["preset"]
    max_tokens = args.max_tokens or defaults["max_tokens"] or load_preset(preset).train.max_tokens
    return DevicesSettings(preset=preset, model_settings=list(args.settings), max_tokens=max_tokens,
                           steps=args.steps or defaults["steps"],
                           warmup=defaults["warmup"] if args.warmup is None else args.warmup,
                           precision=args.precision, threads=args.threads, smoke=bool(args.smoke))


def epoch_steps(max_tokens: int, n_pairs: int = MULTI30K_TRAIN_PAIRS) -> int:
    """Batches in one epoch of ``n_pairs`` pairs with Multi30k-like lengths, filled greedily as
    ``benchmarks.train_batches.make_batches`` fills them (a batch takes pairs while pairs × longest ≤ max_tokens).

    The trainer's sampler sorts pairs by length within chunks and so pads less: its epochs have somewhat fewer
    steps, which makes this extrapolation err long.
    """
    steps = size = longest = 0
    for pair in sentence_lengths(n_pairs):
        longer = max(pair)
        if size and (size + 1) * max(longest, longer) > max_tokens:
            steps, size, longest = steps + 1, 0, 0
        size, longest = size + 1, max(longest, longer)
    return steps + (1 if size else 0)


def time_training_phases(config: ModelConfig, batches: list[TeacherForcedBatch], device: torch.device,
                         precision: str, warmup: int) -> PhaseTimes:
    """Per-step seconds of forward, backward, optimizer and the whole step, after ``warmup`` untimed steps;
    then the peak memory of one more step on the largest batch."""
    step = TrainingStep(config, device, precision)
    batches = [batch.to(device) for batch in batches]
    for batch in batches[:warmup]:
        step(batch)
    seconds: dict[str, list[float]] = {name: [] for name in PHASES}
    tokens = 0
    for batch in batches[warmup:]:
        sync(device)
        marks = [time.perf_counter()]
        tokens += step(batch, marks)
        for name, start, end in zip(PHASES, marks, marks[1:]):
            seconds[name].append(end - start)
        seconds["step"].append(marks[-1] - marks[0])
    largest = max(batches, key=lambda b: b.src.numel() + b.tgt_in.numel())
    peak = step.peak_memory(largest)
    del step, batches
    free_memory(device)
    return PhaseTimes(seconds=seconds, target_tokens=tokens, peak_memory=peak.peak, peak_method=peak.method)


def run(args: argparse.Namespace) -> int:
    settings = resolve_settings(args)
    config = preset_model_config(settings.preset, settings.model_settings)
    devices = [torch.device("cpu")]
    if args.device != "cpu" and torch.cuda.is_available():
        devices.append(torch.device("cuda"))
    elif args.device == "cuda":
        raise VaswaniError("--device cuda but no CUDA device is visible")
    if settings.threads:
        torch.set_num_threads(settings.threads)


    batches = make_batches(config, settings.max_tokens, settings.warmup + settings.steps)
    n_epoch_steps = epoch_steps(settings.max_tokens)
    halves: dict[str, DeviceHalf] = {}
    for device in devices:
        precision = resolve_precision(settings.precision, device)
        log(f"devices: {settings.steps} steps of the {settings.preset} model on {device_label(device)}, {precision}")
        times = time_training_phases(config, batches, device, precision, settings.warmup)
        halves[device.type] = _summary(times, device_label(device), precision, n_epoch_steps)

    ratios = _ratios(halves)
    gpu_note = None if "cuda" in halves else "No GPU visible: only the CPU half ran; there is no CPU/GPU ratio"
    n_params = sum(p.numel() for p in _meta_model(config).parameters())
    results = {"model": config.to_dict(), "parameters": n_params, "max_tokens": settings.max_tokens,
               "epoch_steps": n_epoch_steps, "epoch_pairs": MULTI30K_TRAIN_PAIRS,
               "devices": {name: to_json(half) for name, half in halves.items()},
               "cpu_over_gpu": ratios, "gpu_available": "cuda" in halves, "note": gpu_note}
    main_device = devices[-1]
    table = _table(settings, config, n_params, halves, ratios, n_epoch_steps, gpu_note, main_device,
                   args.command_line)
    write_results(args.out, "devices", args.command_line, main_device, dataclasses.asdict(settings), results, table,
                  {"phases": _plot(halves, settings)})
    for name, half in halves.items():
        print(f"{name}: forward {half.forward_ms:.1f} ms, backward {half.backward_ms:.1f} ms, optimizer "
              f"{half.optimizer_ms:.1f} ms, step {half.step_ms:.1f} ms, "
              f"epoch ≈ {half.epoch_minutes:.1f} min (extrapolated), peak {half.peak_memory / MiB:.1f} MiB")
    print(gpu_note or "cpu/gpu: " + ", ".join(f"{k} {v:.1f}x" for k, v in ratios.items()))
    print(f"results in {args.out}")
    return 0


def _meta_model(config: ModelConfig) -> torch.nn.Module:
    with torch.device("meta"):
        return Transformer(config)


def _summary(times: PhaseTimes, device: str, precision: str, n_epoch_steps: int) -> DeviceHalf:
    seconds = times.seconds
    mean = {name: sum(v) / len(v) for name, v in seconds.items()}
    return DeviceHalf(**dataclasses.asdict(times), device=device, precision=precision,
                      **{f"{name}_ms": 1000 * mean[name] for name in PHASES},
                      tokens_per_s=times.target_tokens / sum(seconds["step"]),
                      epoch_minutes=mean["step"] * n_epoch_steps / 60)


def _ratios(halves: dict[str, DeviceHalf]) -> dict[str, float]:
    if "cuda" not in halves:
        return {}
    cpu, gpu = halves["cpu"], halves["cuda"]
    keys = [f"{name}_ms" for name in PHASES] + ["epoch_minutes", "peak_memory"]
    return {key: getattr(cpu, key) / getattr(gpu, key) for key in keys if getattr(gpu, key)}


def _table(settings: DevicesSettings, config: ModelConfig, n_params: int, halves: dict[str, DeviceHalf],
           ratios: dict[str, float], n_epoch_steps: int, gpu_note: str | None, device: torch.device,
           command: str) -> str:
    headers = ["device", "precision", "forward (ms)", "backward (ms)", "optimizer (ms)", "step (ms)",
               "target tok/s", "epoch (min, extrapolated)", "peak memory (MiB)"]
    body = [[h.device, h.precision, h.forward_ms, h.backward_ms, h.optimizer_ms, h.step_ms, h.tokens_per_s,
             h.epoch_minutes, h.peak_memory / MiB] for h in halves.values()]
    if ratios:
        body.append(["**CPU / GPU**", "", *[f"{ratios.get(k, float('nan')):.1f}×" for k in
                                            ("forward_ms", "backward_ms", "optimizer_ms", "step_ms")],
                     f"{1 / ratios['step_ms']:.2f}×", f"{ratios['epoch_minutes']:.1f}×",
                     f"{ratios['peak_memory']:.2f}×"])
    lines = [
        f"# CPU vs GPU: one training step, phase by phase ({settings.preset} model)",
        "",
        provenance_line(device, command),
        "",
    ]
    if gpu_note:
        lines += [f"**{gpu_note}.** Run the same command on a machine with a GPU for the comparison.", ""]
    lines += [
        f"Same hyper-parameters on every device: d_model {config.d_model}, {config.n_heads} heads, "
        f"{config.n_encoder_layers}+{config.n_decoder_layers} layers, d_ff {config.d_ff}, vocabulary "
        f"{config.vocab_size:,} ({n_params:,} parameters), attention `{config.attention}`, dropout {config.dropout}; "
        f"AdamW, label smoothing 0.1, gradient clipping 1.0; token budget {settings.max_tokens:,} per batch, the "
        f"same {settings.steps} batches of random tokens with Multi30k-like lengths on every device, after "
        f"{settings.warmup} untimed warm-up step{'s' if settings.warmup != 1 else ''}. Times are means per step, "
        "synchronised around every phase.",
        "",
        markdown_table(headers, body),
        "",
        f"**Epoch time is extrapolated**, not measured: mean step time × {n_epoch_steps:,} steps, the number of "
        f"batches that {MULTI30K_TRAIN_PAIRS:,} Multi30k-like pairs make at this token budget when filled greedily "
        "in random order (the trainer sorts by length within chunks and pads less, so real epochs have fewer "
        "steps); validation is not included.",
        "",
        "Phases: *forward* includes the loss; *optimizer* is gradient clipping + AdamW step + zeroing the "
        "gradients. Peak memory is one step on the largest of these batches: "
        + "; ".join(f"{name}: {h.peak_method}" for name, h in halves.items()) + ". Dropout keeps a 1-byte "
        "mask per element on every device (`vaswani.model.Dropout`); only dropout on the attention weights keeps "
        f"a noise tensor of their dtype on the CPU (`model.attention_dropout`: {config.attention_dropout:g} here).",
    ]
    return "\n".join(lines)


def _plot(halves: dict[str, DeviceHalf], settings: DevicesSettings) -> Any:
    """Grouped bars, one group per phase, one bar per device, on a log axis (the devices differ by orders of
    magnitude)."""
    plt = pyplot()
    figure, axis = plt.subplots(figsize=(7, 4))
    names = list(halves)
    width = 0.8 / len(names)
    for index, name in enumerate(names):
        values = [getattr(halves[name], f"{phase}_ms") for phase in PHASES]
        axis.bar([p + index * width for p in range(len(PHASES))], values, width=width, label=halves[name].device)
    axis.set_xticks([p + width * (len(names) - 1) / 2 for p in range(len(PHASES))], PHASES)
    axis.set_yscale("log")
    axis.set_ylabel("ms (mean per training step)")
    axis.set_title(f"Training step by phase ({settings.preset} model, {settings.max_tokens} tokens/batch)")
    axis.legend(fontsize=7)
    return figure
