"""What the fault loop (tools/faults.py) records of each kill and of the whole loop, as results.json holds it
(results/reliability/)."""

from __future__ import annotations

from dataclasses import dataclass

from vaswani.benchmarks.engines import Stamp


@dataclass(frozen=True)
class CheckpointCheck:
    """The ``step_*`` directories of a run that loaded, and one line for each that did not."""

    checked: list[str]
    broken: list[str]


@dataclass(frozen=True)
class Kill:
    """One kill of the faulty run: where it was aimed, where it landed, what it left on disk."""

    kill: int
    target: str
    landed: str  # the last phase the process announced before it died
    step: int
    delay_ms: float
    resumed_from: int | None  # None: the process started from scratch
    partial_files_left: list[str]
    checkpoints_on_disk: int
    checkpoints_loaded: int
    broken: list[str]


@dataclass(frozen=True)
class Comparison:
    """The finished faulty run against the uninterrupted reference: its weights and its metrics log."""

    bit_identical: bool
    differing_tensors: list[str]
    tensors_compared: int
    metrics_hold_each_update_once: bool


@dataclass(frozen=True)
class FaultLoopResult:
    """The whole loop: what results/reliability/results.json holds."""

    kills: list[Kill]
    kills_done: int
    kills_asked: int
    finished_before_all_kills: bool
    final_resumed_from: int | None
    max_steps: int
    reference_updates: int
    bit_identical: bool
    differing_tensors: list[str]
    tensors_compared: int
    metrics_hold_each_update_once: bool
    every_checkpoint_loaded: bool
    landed: dict[str, int]  # kills per phase they landed in
    process_start_method: str
    seed: int
    settings: list[str]
    preset: str
    seconds: float
    provenance: Stamp | None = None  # added by write_results
