"""`vaswani experiment attention`: its arguments, the settings they resolve to, and the run that measures
(``measure``) and writes the results (``report``)."""

from __future__ import annotations

import argparse
import dataclasses
from typing import Any

import torch

from vaswani.arguments import ranged
from vaswani.config import DEFAULT_SLIDING_WINDOW
from vaswani.data.commands import add_data_dir_argument
from vaswani.devices import resolve_device
from vaswani.errors import ConfigError
from vaswani.experiments.attention import report
from vaswani.experiments.attention.measure import measure
from vaswani.experiments.attention.results import results_json
from vaswani.experiments.attention.settings import CPU_DEFAULTS, GPU_DEFAULTS, SMOKE, AttentionSettings
from vaswani.experiments.reporting import device_label, log, write_results
from vaswani.precision import resolve_precision
from vaswani.settings import MAX_BATCH, MAX_COUNT, MAX_LENGTH, PRECISIONS


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--lengths", type=ranged(int, ge=1, le=MAX_LENGTH), nargs="+", default=None,
                        help="sequence lengths (default CPU 64..2048, GPU 64..16384)")
    parser.add_argument("--batch-sizes", type=ranged(int, ge=1, le=MAX_BATCH), nargs="+", default=None,
                        help="batch sizes (default CPU 1 8, GPU 1 8 32)")
    parser.add_argument("--d-model", type=ranged(int, ge=1, le=MAX_LENGTH), default=None,
                        help="model width of the layer (default 512)")
    parser.add_argument("--heads", type=ranged(int, ge=1, le=MAX_LENGTH), default=None,
                        help="attention heads (default 8)")
    parser.add_argument("--window", type=ranged(int, ge=1, le=MAX_LENGTH), default=DEFAULT_SLIDING_WINDOW,
                        help="sliding window k of the +window variants (default %(default)s)")
    parser.add_argument("--windows", type=ranged(int, ge=1, le=MAX_LENGTH), nargs="+", default=None,
                        help="the windows k of the memory-against-k table (default CPU 16..256, GPU 16..512)")
    parser.add_argument("--window-length", type=ranged(int, ge=1, le=MAX_LENGTH), default=None,
                        help="sequence length of the memory-against-k table (default: the longest of --lengths)")
    parser.add_argument("--causal", action="store_true",
                        help="decoder self-attention (causal) instead of the encoder's bidirectional form")
    parser.add_argument("--dropout", type=ranged(float, ge=0, lt=1), default=0.0,
                        help="attention dropout in the microbenchmark (default 0: the CPU fused kernel is eligible)")
    parser.add_argument("--max-seconds", type=ranged(float, gt=0), default=None,
                        help="time cap per point in seconds (default CPU 20, GPU 10); longer lengths are skipped "
                        "once the cap would be exceeded")
    parser.add_argument("--repeats", type=ranged(int, ge=1, le=MAX_COUNT), default=None,
                        help="timed repeats per point, median reported (default CPU 3, GPU 10)")
    parser.add_argument("--model-preset", default=None, help="model preset of the whole-model step (default small)")
    parser.add_argument("--model-lengths", type=ranged(int, ge=1, le=MAX_LENGTH), nargs="+", default=None,
                        help="sentence lengths of the whole-model step (default CPU 32 128 512, GPU also 2048)")
    parser.add_argument("--model-tokens", type=ranged(int, ge=1, le=MAX_BATCH), default=None,
                        help="tokens per batch of the whole-model step (default CPU 1024, GPU 8192)")
    parser.add_argument("--train-steps", type=ranged(int, ge=0, le=MAX_COUNT), default=0,
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

    lengths = sorted(pick("lengths"))
    d_model, heads = pick("d_model"), pick("n_heads", "heads")
    if d_model % heads:
        raise ConfigError(f"--d-model {d_model} is not divisible by --heads {heads}: each head takes an equal share "
                          "of the model's width; pick a --heads that divides --d-model")
    return AttentionSettings(
        d_model=d_model, n_heads=heads, lengths=lengths,
        batch_sizes=list(pick("batch_sizes")), window=args.window, causal=bool(args.causal), dropout=args.dropout,
        warmup=defaults["warmup"], repeats=pick("repeats"), max_seconds=pick("max_seconds"),
        agreement_max_length=defaults["agreement_max_length"], windows=sorted(pick("windows")),
        window_length=pick("window_length") or lengths[-1], model_preset=pick("model_preset"),
        model_lengths=list(pick("model_lengths")), model_tokens=pick("model_tokens"),
        train_steps=args.train_steps, train_preset=pick("train_preset"), train_settings=list(args.train_settings),
        data_dir=str(args.data_dir) if args.data_dir else None, precision=resolve_precision(args.precision, device),
        smoke=bool(args.smoke))


def run(args: argparse.Namespace) -> int:
    device = resolve_device(args.device)
    settings = resolve_settings(args, device)
    precision = settings.precision
    log(f"attention: d_model {settings.d_model}, {settings.n_heads} heads, {precision} on {device_label(device)}")
    results = measure(settings, device)
    points = results.microbenchmark
    figures = {
        "time_vs_length": report.plot_against_length(points, settings, "seconds", "forward+backward time (s)",
                                                     device, precision),
        "memory_vs_length": report.plot_against_length(points, settings, "extra_memory",
                                                       "peak memory above inputs (MiB)", device, precision),
        "memory_vs_window": report.plot_memory_against_window(results.window_sweep, settings, device,
                                                              precision),
    }
    readme = "\n".join(["# Attention backends: what this run shows", "",
                        *[f"- {line}" for line in report.findings(results, settings, device)], "",
                        "Numbers and method: [table.md](table.md); raw values: results.json."])
    write_results(args.out, "attention", args.command_line, device, dataclasses.asdict(settings),
                  results_json(results), report.table(settings, results, device, args.command_line), figures,
                  readme=readme)
    report.print_summary(results, args.out)
    return 0
