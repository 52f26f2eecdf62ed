"""What `vaswani bench decode` (benchmarks/decode.py) prints and writes to ``--out``: its rows and comparisons."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from vaswani.benchmarks.engines import Stamp
from vaswani.decoding.config import SearchConfig


@dataclass(frozen=True)
class TimingRow:
    """A row of the report's "results": a :class:`SearchTiming` with its figures."""

    name: str
    sentences: int
    tokens: int
    runs: list[float]
    seconds: float
    sentences_per_s: float
    tokens_per_s: float


@dataclass(frozen=True)
class BackendComparison:
    """The model's attention backend against the other one, same weights."""

    model: str
    other: str
    # per search, median over interleaved repeats of (time with the other backend) / (time with the model's own)
    own_speedup: dict[str, float]


@dataclass(frozen=True)
class CompiledComparison:
    """The compiled decoding step against the eager one."""

    speedup: dict[str, float]  # per search, median over interleaved repeats of eager / compiled
    first_pass_seconds: dict[str, float]  # per search, compiling included


@dataclass(frozen=True)
class Comparisons:
    """What each part of the decoder buys: the report's "comparisons", printed and written."""

    cache_speedup: float
    cache_speedup_decoder_only: float
    batched_beam_speedup_per_sentence: float
    preallocated_cache_speedup: dict[str, float]  # median over interleaved repeats of grown / preallocated
    attention_backend: BackendComparison
    compiled_step: CompiledComparison | None  # None without --compile


@dataclass(frozen=True)
class BenchModel:
    """The model that was timed."""

    checkpoint: str | None
    preset: str | None  # None with a checkpoint
    parameters: int
    config: dict[str, Any]


@dataclass(frozen=True)
class DecodeReport(Stamp):
    """The JSON at ``--out``."""

    arguments: dict[str, Any]
    model: BenchModel
    fixed_output_length: bool
    search: dict[str, SearchConfig]  # "natural" and "fixed"
    results: list[TimingRow]
    comparisons: Comparisons


def print_comparisons(comparisons: Comparisons, beam_label: str) -> None:
    """The comparisons, a line each, for the terminal."""
    backends = comparisons.attention_backend
    print(f"KV cache: {comparisons.cache_speedup:.1f}x faster than model(src, prefix) "
          f"({comparisons.cache_speedup_decoder_only:.1f}x than recomputing the decoder only)")
    print("preallocated caches: " + ", ".join(f"{label} {x:.2f}x" for label, x in
                                              comparisons.preallocated_cache_speedup.items())
          + " faster than caches grown per step")
    print(f"batched {beam_label}: {comparisons.batched_beam_speedup_per_sentence:.1f}x faster per sentence than "
          "one sentence at a time")
    print(f"{backends.model} attention vs {backends.other}: "
          + ", ".join(f"{label} {x:.2f}x" for label, x in backends.own_speedup.items()))
    if comparisons.compiled_step:
        print("compiled decoding step vs eager: " + ", ".join(f"{label} {x:.2f}x" for label, x in
                                                              comparisons.compiled_step.speedup.items()))


def compiled_lines(compiled: CompiledComparison | None) -> list[str]:
    """The markdown lines on the compiled decoding step (none when it was not measured)."""
    if compiled is None:
        return []
    return ["",
            "Compiled decoding step (`torch.compile`) vs eager, same weights (median of interleaved repeats, > 1: "
            "compiled is faster): " + ", ".join(f"{label} {x:.2f}×" for label, x in compiled.speedup.items())
            + ".  ",
            "First pass over the same batches with the compiled step, compiling included (each search reuses what "
            "the ones before it compiled): " + ", ".join(f"{label} {x:.1f} s" for label, x in
                                                          compiled.first_pass_seconds.items()) + "."]
