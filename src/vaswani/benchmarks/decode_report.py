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
