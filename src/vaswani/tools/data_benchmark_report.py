"""What `vaswani bench data` (tools/data_benchmark.py) measures and writes to ``--out/results.json``: a row per
corpus size and machine."""

from __future__ import annotations

from dataclasses import dataclass

from vaswani.benchmarks.engines import Stamp

# Figures a row may lack (None): results.json leaves them out of the row rather than writing null, so that every
# row keeps the keys it was measured with.
OPTIONAL_FIGURES = ("cpu_seconds", "phase_cpu_seconds", "phase_cpu_over_wall")


@dataclass(frozen=True, kw_only=True)
class Prepared:
    """``vaswani prepare`` timed: wall and CPU seconds, peak memory, load, and per phase its wall seconds, CPU
    seconds and CPU over wall seconds (the cores it kept busy; a phase too short to say has none)."""

    seconds: float
    cpu_seconds: float | None = None
    peak_gb: float
    phases: dict[str, float]
    phase_cpu_seconds: dict[str, float] | None = None
    phase_cpu_over_wall: dict[str, float] | None = None
    load_before: list[float]
    load_after: list[float]


@dataclass(frozen=True, kw_only=True)
class Trained:
    """``vaswani train`` timed until its first update was logged, and to its end."""

    first_update_seconds: float | None  # None: the sampling never saw the update logged
    peak_gb_until_first_update: float
    seconds: float
    cpu_seconds: float | None = None
    peak_gb: float
    load_before: list[float]
    load_after: list[float]


@dataclass(frozen=True)
class Measurement:
    """One corpus size prepared and trained on."""

    pairs: int
    prepare: Prepared
    train: Trained


@dataclass(frozen=True, kw_only=True)
class Row:
    """A row of results.json: a measurement, and the machine, command and commit it was measured with."""

    machine: str | None = None  # None in a file whose rows do not name it: the machine the file names
    pairs: int
    prepare: Prepared
    train: Trained
    command: str
    commit: str | None
    dirty: bool | None
    measured: str  # local time, "%Y-%m-%d %H:%M"


@dataclass(frozen=True)
class BenchSettings:
    """What every row of a results file shares: the corpus seed and the prepare's settings."""

    seed: int
    vocab_size: int
    max_len: int


@dataclass(frozen=True, kw_only=True)
class DataScaleResults(Stamp):
    """results.json: the provenance of its latest writer, the settings and every row measured so far."""

    settings: BenchSettings
    rows: list[Row]
