"""What `vaswani bench train` computes: every model trained by the same code on the same batches, their steps
alternated, then tokens/s, the ratios between them, model FLOP/s and MFU, and (``profile_threads``) where each
model's step spends its time.

Every model is trained by :func:`vaswani.training.step.train_step` with AdamW and the same loss (cross-entropy
summed over real target tokens, plain or label-smoothed), in the same precision. Timed steps alternate between the
models (A, B, A, B, …) in one process, so a load change on the machine hits every model alike; the median of the
repeats is reported with the spread.
"""

from __future__ import annotations

import dataclasses
import statistics
import time
from dataclasses import dataclass, field
from typing import Callable

import torch
import torch.nn as nn

from vaswani.benchmarks.profiling import PROFILE_PASSES, OperatorProfile, profile_by_kind
from vaswani.benchmarks.train_batches import TrainBatch, benchmark_batches
from vaswani.benchmarks.train_peers import PEERS, SPEEDUPS, TwoCrossEntropiesLoss, with_torch_dropout
from vaswani.config import ModelConfig
from vaswani.devices import synchronize
from vaswani.model import Transformer
from vaswani.training.device_choices import compile_options, defers_host_reads, loss_over_all_positions, recompile_limit
from vaswani.training.flops import peak_flops
from vaswani.training.loss import TranslationLoss
from vaswani.training.step import train_step

OURS = "vaswani"
PROFILED_BATCHES = 3  # the first batches of a setting, profiled per model


@dataclass
class TrainBenchSettings:
    """What one `vaswani bench train` measures: every combination of batch kind, loss and precision."""

    config: ModelConfig  # ours; every peer is built with the same dimensions
    variants: list[tuple[str, ModelConfig]] = field(default_factory=list)  # ours with other model settings
    peers: list[str] = field(default_factory=lambda: ["torch"])  # keys of PEERS
    batch_kinds: list[str] = field(default_factory=lambda: ["random"])
    losses: list[str] = field(default_factory=lambda: ["smoothed"])  # "plain" | "smoothed" (0.1)
    precisions: list[str] = field(default_factory=lambda: ["fp32"])
    max_tokens: int = 2048
    steps: int = 8
    warmup: int = 3
    repeats: int = 3
    speedups: bool = False  # also race ours with each speed-up undone
    foreach: bool = False  # AdamW for-each for every model instead of fused
    profile_threads: list[int] = field(default_factory=list)
    profile_passes: int = PROFILE_PASSES
    data_dir: str | None = None
    length_buckets: int | None = None  # multi30k batches of this many fixed shapes, as train.length_buckets
    compile: bool = False  # ours compiled once per batch shape, as train.compile
    cuda_graphs: bool = False  # ours replayed as CUDA graphs, as train.cuda_graphs


@dataclass
class ModelSpeed:
    """A model's tokens/s (median, range, every repeat's), trainable parameters, model FLOP/s and MFU."""

    tokens_per_s: float
    min: float
    max: float
    runs: list[float]
    parameters: int
    model_flops_per_s: float
    mfu: float


@dataclass
class ResultRow:
    """The row of one setting (batch kind, loss, precision) in the report's "results"."""

    batches: str
    loss: str
    precision: str
    sentences_per_batch: float
    target_tokens_per_batch: float
    padding: float
    models: dict[str, ModelSpeed]
    peak_flops: float
    peak_source: str
    ours_over: dict[str, float]  # median over repeats of the ratio within a repeat
    ours_over_medians: dict[str, float]  # the ratio of the medians
    # Each variant against each peer: a variant that switches something off (dropout, say) bounds what making
    # that thing cheaper could buy against the peer.
    variants_over_peers: dict[str, dict[str, float]]


class Contender:
    """One model, its optimizer and its step over the benchmark's batches."""

    def __init__(self, name: str, module: nn.Module, precision: str, fused: bool = True, deferred: bool = False):
        self.name, self.module, self.precision = name, module, precision
        self.deferred = deferred  # the step training takes on this device (training/device_choices.py)
        self.optimizer = torch.optim.AdamW(module.parameters(), lr=1e-4, betas=(0.9, 0.98), eps=1e-9, fused=fused)
        self.rates: list[float] = []
        self.parameters = sum(p.numel() for p in module.parameters() if p.requires_grad)

    def step(self, batch: TrainBatch) -> int:
        tokens = batch.tokens
        train_step(self.module, self.optimizer, [batch], tokens, precision=self.precision, defer_reads=self.deferred)
        return tokens

    def timed_step(self, batch: TrainBatch, device: torch.device) -> tuple[int, float]:
        synchronize(device)
        start = time.perf_counter()
        tokens = self.step(batch)
        synchronize(device)
        return tokens, time.perf_counter() - start

    def speed(self, flops_per_token: float, peak_flops: float) -> ModelSpeed:
        """Its tokens/s over the repeats raced, and the model FLOP/s and MFU they make."""
        median = statistics.median(self.rates)
        flops = flops_per_token * median
        return ModelSpeed(median, min(self.rates), max(self.rates), self.rates, self.parameters, flops,
                          flops / peak_flops)

    def over(self, other: Contender) -> float:
        """The median over repeats of this model's tokens/s over ``other``'s within a repeat: each repeat's steps
        alternated, so its ratio saw one load."""
        return statistics.median(a / b for a, b in zip(self.rates, other.rates))


def race(contenders: list[Contender], batches: list[TrainBatch], device: torch.device, warmup: int,
         repeats: int) -> None:
    """Warm every contender up, then take turns *step by step* on the same batches (A, B, A, B, …): on a shared
    machine the load changes within seconds, and alternating single steps exposes every model to it alike.
    Each repeat gives every contender one tokens/s figure over all timed batches."""
    for contender in contenders:
        for batch in batches[:warmup]:
            contender.step(batch)
    for _ in range(repeats):
        totals = {id(c): [0, 0.0] for c in contenders}
        for batch in batches[warmup:]:
            for contender in contenders:
                tokens, seconds = contender.timed_step(batch, device)
                totals[id(contender)][0] += tokens
                totals[id(contender)][1] += seconds
        for contender in contenders:
            tokens, seconds = totals[id(contender)]
            contender.rates.append(tokens / seconds)


@dataclass
class _OnThreads:
    threads: int


@dataclass
class ContenderProfile(OperatorProfile, _OnThreads):
    """One model's profiled steps at ``threads`` intra-op threads, and the time the same batches took it in
    the timed steps (None when those ran at another thread count): what the ceiling is taken against."""

    # A dataclass lists its last base's fields first: threads, then the profile's, as the report's JSON has them.
    timed_ms: float | None = None


def profile_steps(contender: Contender, batches: list[TrainBatch], threads: int,
                  passes: int = PROFILE_PASSES) -> ContenderProfile:
    """A few steps of ``contender`` under torch.profiler at ``threads`` intra-op threads, by operator kind."""
    threads_outside = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        profile = profile_by_kind(lambda: [contender.step(batch) for batch in batches], passes=passes)
        return ContenderProfile(threads, **vars(profile))
    finally:
        torch.set_num_threads(threads_outside)


def measure(settings: TrainBenchSettings, device: torch.device,
            on_row: Callable[[ResultRow], None] = lambda row: None
            ) -> tuple[list[ResultRow], dict[str, dict[str, ContenderProfile]]]:
    """One result row per (batch kind, loss, precision), each handed to ``on_row`` as it is measured, and the
    profiles by setting (empty without ``profile_threads``)."""
    rows: list[ResultRow] = []
    profiles: dict[str, dict[str, ContenderProfile]] = {}
    peaks: dict[str, tuple[float, str]] = {}
    for kind in settings.batch_kinds:
        batches = benchmark_batches(kind, settings.config, settings.max_tokens, settings.warmup + settings.steps,
                                    settings.data_dir, settings.length_buckets)
        for loss in settings.losses:
            for precision in settings.precisions:
                contenders = build_contenders(settings, _label_smoothing(loss), precision, device)
                device_batches = [b.to(device) for b in batches]
                if settings.compile or settings.cuda_graphs:  # every shape compiled (and recorded) before timing
                    shapes = {(b.src.shape, b.tgt_in.shape): b for b in device_batches}
                    for batch in list(shapes.values()) * 3:
                        contenders[0].step(batch)
                race(contenders, device_batches, device, settings.warmup, settings.repeats)
                if precision not in peaks:
                    peaks[precision] = peak_flops(device, precision)
                row = result_row(settings, kind, loss, precision, batches, contenders, peaks[precision])
                rows.append(row)
                on_row(row)
                for threads in settings.profile_threads:
                    key = f"{kind} batches, {loss} loss, {precision}, {threads} thread{'s' if threads > 1 else ''}"
                    profiles[key] = profile_contenders(contenders, device_batches, threads, settings.profile_passes)
    return rows, profiles


def _label_smoothing(loss: str) -> float:
    return 0.1 if loss == "smoothed" else 0.0


def build_contenders(settings: TrainBenchSettings, smoothing: float, precision: str,
                     device: torch.device) -> list[Contender]:
    """Ours first, then our variants, the peers and (``speedups``) ours with each speed-up undone: each built from
    the same seed."""
    config = settings.config
    # ours as training runs it on this device: its loss, its compilation and its step (training/device_choices.py)
    ours_compiled = compile_options(settings.compile, settings.cuda_graphs, device,
                                    bucketed=bool(settings.length_buckets))
    all_positions = loss_over_all_positions(device, compiled=ours_compiled is not None)
    deferred = defers_host_reads("auto", device)
    builds = [(OURS, lambda c=config: TranslationLoss(Transformer(c), smoothing, all_positions))] + [
        (f"{OURS} {label}", lambda c=c: TranslationLoss(Transformer(c), smoothing))
        for label, c in settings.variants
    ] + [(PEERS[p][0], lambda p=p: PEERS[p][1](config, smoothing)) for p in settings.peers]
    contenders = []
    for name, build in builds:
        torch.manual_seed(0)
        module = build().to(device)
        if name == OURS and ours_compiled is not None:
            torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit,
                                                       recompile_limit(settings.length_buckets or 1))
            module = torch.compile(module, **ours_compiled.arguments())
        contenders.append(Contender(name, module, precision, fused=not settings.foreach, deferred=deferred))
    if settings.speedups:
        contenders += speedup_contenders(config, smoothing, precision, device)
    return contenders


def speedup_contenders(config: ModelConfig, smoothing: float, precision: str,
                       device: torch.device) -> list[Contender]:
    """Ours with each of :data:`SPEEDUPS` undone, one at a time."""
    def ours(c: ModelConfig = config) -> nn.Module:
        torch.manual_seed(0)
        return TranslationLoss(Transformer(c), smoothing).to(device)

    dropout, loss, adamw, torch_dropout, compiled = SPEEDUPS
    torch.manual_seed(0)
    return [
        Contender(f"{OURS}, {dropout}", ours(ModelConfig(**{**config.to_dict(), "attention_dropout": 0.1})),
                  precision),
        Contender(f"{OURS}, {loss}", TwoCrossEntropiesLoss(Transformer(config), smoothing).to(device), precision),
        Contender(f"{OURS}, {adamw}", ours(), precision, fused=False),
        Contender(f"{OURS}, {torch_dropout}", with_torch_dropout(ours()), precision),
        Contender(f"{OURS}, {compiled}", torch.compile(ours()), precision),
    ]


def result_row(settings: TrainBenchSettings, kind: str, loss: str, precision: str, batches: list[TrainBatch],
               contenders: list[Contender], peak: tuple[float, str]) -> ResultRow:
    """The row of one setting: the batches, each model's tokens/s with its model FLOP/s and MFU, and the ratios.

    MFU, model FLOPs utilisation: FLOPs per token of the timed batches × tokens/s over the device's peak (the
    datasheet's on a known GPU, a large matmul's measured in this run elsewhere)."""
    timed = batches[settings.warmup :]
    # The dimensions that set a model's FLOPs: a variant's own, everyone else's are ours.
    dims = {OURS: settings.config, **{f"{OURS} {label}": c for label, c in settings.variants}}
    tokens = sum(b.tokens for b in timed)
    models = {c.name: c.speed(sum(b.training_flops(dims.get(c.name, settings.config)) for b in timed) / tokens,
                              peak[0]) for c in contenders}
    ours, others = contenders[0], contenders[1:]
    n = len(settings.variants)
    variants_raced, peers_raced = contenders[1 : 1 + n], contenders[1 + n : 1 + n + len(settings.peers)]
    return ResultRow(
        kind, loss, precision, sentences_per_batch=statistics.mean(b.src.size(0) for b in batches),
        target_tokens_per_batch=statistics.mean(b.tokens for b in batches),
        padding=1 - statistics.mean(b.tokens / b.tgt_out.numel() for b in batches), models=models,
        peak_flops=peak[0], peak_source=peak[1], ours_over={c.name: ours.over(c) for c in others},
        ours_over_medians={c.name: models[OURS].tokens_per_s / models[c.name].tokens_per_s for c in others},
        variants_over_peers={v.name: {p.name: v.over(p) for p in peers_raced} for v in variants_raced})


def profile_contenders(contenders: list[Contender], batches: list[TrainBatch], threads: int,
                       passes: int) -> dict[str, ContenderProfile]:
    """Each model's first :data:`PROFILED_BATCHES` steps under torch.profiler, with the time those batches took it
    at its median speed in the timed (unprofiled) steps when those ran at the profile's thread count: the time
    the ceiling is taken against."""
    first = batches[:PROFILED_BATCHES]
    tokens = sum(b.tokens for b in first)
    timed = threads == torch.get_num_threads()
    return {c.name: dataclasses.replace(profile_steps(c, first, threads, passes),
                                        timed_ms=1e3 * tokens / statistics.median(c.rates) if timed else None)
            for c in contenders}


__all__ = ["Contender", "ContenderProfile", "ModelSpeed", "OURS", "ResultRow", "TrainBenchSettings",
           "build_contenders", "measure", "profile_contenders", "profile_steps", "race", "result_row",
           "speedup_contenders"]
