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


def render_table(results: DataScaleResults) -> str:
    lines = [
        "# Preparing a corpus at scale, and starting to train on it",
        "",
        f"Synthetic corpus (two Multi30k captions a line, seed {results.settings.seed}), vocabulary "
        f"{results.settings.vocab_size:,}, max_len {results.settings.max_len}; each row on the "
        "machine it names. Peak memory: the largest sum "
        "of the resident set sizes of the command and its workers. CPU: the user and system seconds of `vaswani "
        "prepare` and its workers, which the load of other users does not inflate as it does the wall time (on 2 "
        "idle cores the prepare takes at least half of them). CPU/wall by phase: each phase's CPU seconds "
        "over its wall seconds, the cores it kept busy (2.00 is both of 2). Load average (1, 5, 15 min) "
        "before the prepare and after the train command: the machine is shared, so a high load slows every "
        "figure in its row.",
        "",
        "| pairs | machine | prepare | CPU | peak memory | reading | checking | tokenizer | encoding "
        "| CPU/wall by phase | first update | peak memory | load before → after | commit |",
        "|---:|---|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|---|---|",
    ]
    for row in results.rows:
        prepare, train, phases = row.prepare, row.train, row.prepare.phases
        lines.append(
            f"| {row.pairs:,} | {row.machine or '?'} | {prepare.seconds:.1f} s | "
            + (f"{prepare.cpu_seconds:.1f} s" if prepare.cpu_seconds is not None else "–")
            + f" | {prepare.peak_gb:.2f} GB | "
            + " | ".join(f"{phases[p]:.1f} s" if p in phases else "–" for p in ("reading", "checking", "tokenizer",
                                                                               "encoding"))
            + f" | {_busy(prepare.phase_cpu_over_wall or {})}"
            + f" | {train.first_update_seconds} s | {train.peak_gb_until_first_update:.2f} GB | "
            f"{_load(prepare.load_before)} → {_load(train.load_after)} | `{(row.commit or '?')[:10]}`"
            f"{' + changes' if row.dirty else ''} |")
    lines += ["", f"Command: `{results.command}` (each row names its own in results.json)."]
    return "\n".join(lines) + "\n"


def _busy(ratios: dict[str, float]) -> str:
    return ", ".join(f"{phase} {ratio:.2f}" for phase, ratio in ratios.items()) or "–"


def _load(values: list[float]) -> str:
    return " ".join(f"{value:.2f}" for value in values) or "?"
