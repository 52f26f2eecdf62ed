"""`vaswani bench train`: tokens/s of a training step, ours vs peers of the same size on the same batches.

    train.py          the command: its options, then measure, then write the JSON and the tables
    train_batches.py  the batches every model trains on (fixed, random, real Multi30k)
    train_peers.py    the models raced against ours (torch.nn.Transformer, MarianMT) and our undone speed-ups
    train_race.py     the measurement: steps alternated between the models, tokens/s, ratios, MFU, profiles
    train_report.py   the report written (TrainReport) and its markdown tables

``--profile`` also writes where each model's step spends its time, by kind of operator
(``vaswani.benchmarks.profiling``), next to the table.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch

from vaswani.arguments import add_settings_argument, parse_variant, ranged
from vaswani.benchmarks.profiling import add_passes_argument, matmul_peak
from vaswani.benchmarks.train_batches import BATCH_KINDS
from vaswani.benchmarks.train_peers import PEERS
from vaswani.benchmarks.train_race import ContenderProfile, ResultRow, TrainBenchSettings, measure
from vaswani.benchmarks.train_report import TrainReport, print_row, profile_markdown, speed_table
from vaswani.config import ModelConfig, apply_model_settings
from vaswani.data.commands import add_data_dir_argument
from vaswani.devices import resolve_device, reuse_freed_memory
from vaswani.errors import VaswaniError
from vaswani.io import atomic_write_text, check_output
from vaswani.provenance import provenance
from vaswani.records import write_record
from vaswani.settings import MAX_BATCH, MAX_COUNT, MAX_LENGTH, MAX_THREADS, PRECISIONS
from vaswani.training.device_choices import defers_host_reads


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--preset", default="small", help="model preset (base, small, tiny)")
    add_settings_argument(parser, ("model",), "model.d_model=256")
    parser.add_argument("--peer", nargs="+", default=["torch"], choices=sorted(PEERS),
                        help="models to race against ours (marian needs the bench extra: transformers)")
    parser.add_argument("--variant", action="append", default=[], metavar="NAME:model.KEY=VALUE[,…]",
                        help="also race ours with other model settings, "
                        "e.g. 'attn-dropout:model.attention_dropout=0.1'")
    parser.add_argument("--batches", nargs="+", default=["random"], choices=BATCH_KINDS,
                        help="fixed 64x(16+16) unpadded, real Multi30k token-budget batches, or random padded")
    parser.add_argument("--loss", nargs="+", default=["smoothed"], choices=["plain", "smoothed"],
                        help="cross-entropy without or with label smoothing 0.1")
    parser.add_argument("--precision", nargs="+", default=["fp32", "bf16"], choices=PRECISIONS,
                        help="one or more precisions to measure (default fp32 bf16)")
    parser.add_argument("--max-tokens", type=ranged(int, ge=1, le=MAX_BATCH), default=2048,
                        help="token budget of multi30k/random batches")
    parser.add_argument("--steps", type=ranged(int, ge=1, le=MAX_COUNT), default=8, help="timed steps per repeat")
    parser.add_argument("--warmup", type=ranged(int, ge=0, le=MAX_COUNT), default=3, help="untimed warm-up steps")
    parser.add_argument("--repeats", type=ranged(int, ge=1, le=MAX_COUNT), default=3,
                        help="timed repeats per model, interleaved")
    parser.add_argument("--threads", type=ranged(int, ge=1, le=MAX_THREADS), default=None,
                        help="torch intra-op threads (default: torch's)")
    parser.add_argument("--device", default="auto", help="cpu, cuda or auto")
    add_data_dir_argument(parser)
    parser.add_argument("--length-buckets", type=ranged(int, ge=1, le=MAX_LENGTH), default=None, metavar="N",
                        help="multi30k batches of N fixed shapes, as train.length_buckets makes them (all models)")
    parser.add_argument("--compile", action="store_true",
                        help="ours compiled once per batch shape, as train.compile compiles it")
    parser.add_argument("--cuda-graphs", action="store_true",
                        help="ours replayed as CUDA graphs, as train.cuda_graphs does (needs --length-buckets)")
    parser.add_argument("--speedups", action="store_true",
                        help="also race ours with each training speed-up undone (and with torch.compile)")
    parser.add_argument("--foreach", action="store_true",
                        help="AdamW's for-each implementation for every model (default: fused, as training uses)")
    parser.add_argument("--allocator", choices=["reuse", "system"], default="reuse",
                        help="reuse: keep freed memory for reuse, as CPU training does (train.reuse_freed_memory, "
                             "for every model in this process); system: the C library's default")
    parser.add_argument("--profile", type=ranged(int, ge=1, le=MAX_THREADS), nargs="*", default=None, metavar="THREADS",
                        help="also write torch.profiler tables of each model's step at these thread counts")
    add_passes_argument(parser)
    parser.add_argument("--out", type=Path, default=None,
                        help="write the results as JSON here, and a markdown table next to it (.md)")


def run(args: argparse.Namespace) -> int:
    _check_outputs(args)
    if args.threads:
        torch.set_num_threads(args.threads)
    device = resolve_device(args.device)
    if args.cuda_graphs and not args.length_buckets:
        raise VaswaniError("--cuda-graphs needs --length-buckets: a CUDA graph replays one batch shape")
    if args.cuda_graphs and device.type != "cuda":
        raise VaswaniError(f"--cuda-graphs needs a CUDA device, and this run is on {device.type}")
    allocator = "reuse" if args.allocator == "reuse" and reuse_freed_memory() else "system"
    settings = settings_from_args(args)
    results, profiles = measure(settings, device, on_row=print_row)
    if args.out:
        report = _report(args, settings, device, allocator, results, profiles)
        write_record(args.out, report)
        atomic_write_text(args.out.with_suffix(".md"), speed_table(report))
        if profiles:
            atomic_write_text(args.out.with_suffix(".profile.md"), profile_markdown(report))
        print(f"wrote {args.out} and {args.out.with_suffix('.md')}")
    return 0


def _check_outputs(args: argparse.Namespace) -> None:
    """Refuse an output that cannot be written before minutes of timing, not after."""
    if args.out:
        profile = [args.out.with_suffix(".profile.md")] if args.profile is not None else []
        for path in (args.out, args.out.with_suffix(".md"), *profile):
            check_output(path, command="bench train", writes="file")


def settings_from_args(args: argparse.Namespace) -> TrainBenchSettings:
    config = apply_model_settings(ModelConfig.preset(args.preset, dropout=0.1), args.settings)
    variants = []
    for spec in args.variant:
        label, items = parse_variant(spec, ("model",))
        variants.append((label, apply_model_settings(config, items)))
    return TrainBenchSettings(config=config, variants=variants, peers=list(args.peer),
                              batch_kinds=list(args.batches), losses=list(args.loss),
                              precisions=list(args.precision), max_tokens=args.max_tokens, steps=args.steps,
                              warmup=args.warmup, repeats=args.repeats, speedups=args.speedups,
                              foreach=args.foreach, profile_threads=list(args.profile or []),
                              profile_passes=args.profile_passes, data_dir=args.data_dir,
                              length_buckets=args.length_buckets, compile=args.compile, cuda_graphs=args.cuda_graphs)


def _report(args: argparse.Namespace, settings: TrainBenchSettings, device: torch.device, allocator: str,
            results: list[ResultRow], profiles: dict[str, dict[str, ContenderProfile]]) -> TrainReport:
    """The JSON written to ``--out``: provenance, what was measured, and the results."""
    return TrainReport(
        **provenance(device).to_json(), preset=args.preset, settings=args.settings, model=settings.config,
        variants=dict(settings.variants), torch_threads=torch.get_num_threads(), max_tokens=args.max_tokens,
        steps=args.steps, warmup=args.warmup, repeats=args.repeats, length_buckets=args.length_buckets,
        ours_compile=args.compile, ours_cuda_graphs=args.cuda_graphs, deferred_step=defers_host_reads("auto", device),
        optimizer=f"AdamW(lr=1e-4, betas=(0.9, 0.98), {'for-each' if args.foreach else 'fused'})",
        allocator=allocator, results=results, profile=profiles,
        matmul_peak_gflops={str(t): matmul_peak(t) for t in settings.profile_threads},
        profile_passes=args.profile_passes)


__all__ = ["add_arguments", "run", "settings_from_args"]
