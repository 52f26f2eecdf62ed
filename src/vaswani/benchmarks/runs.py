"""`vaswani bench runs`: training speed of real runs, read from what their trainers logged.

    vaswani bench runs runs/before runs/after --labels before after --out results/bench/multi30k-cpu-runs

Each run's ``metrics.jsonl`` gives its tokens/s (median over the logging windows, evaluations left out) and its
``provenance.jsonl`` the commit and machine it trained on, so the table says which code produced which speed. The
runs should have trained on the same machine, one after the other (never at the same time: they would share the
cores); the table records when each started.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path

from vaswani.errors import VaswaniError
from vaswani.io import atomic_write_json, atomic_write_text, check_output
from vaswani.provenance import first_training_start, provenance
from vaswani.records import to_json
from vaswani.training.metrics import METRICS_FILE, read_metrics, training_speed

RESULT_FILES = ("results.json", "table.md")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("runs", nargs="+", type=Path, metavar="RUN_DIR", help="run directories of `vaswani train`")
    parser.add_argument("--labels", nargs="+", default=None, help="one name per run (default: the folder names)")
    parser.add_argument("--out", type=Path, default=None, help="write results.json and table.md here")


@dataclass(frozen=True)
class RunSpeed:
    """One run's row of the table and of results.json: its speed and the commit, command and machine it trained on."""

    label: str
    run_dir: str
    updates: int
    seconds_per_step: float | None
    tokens_per_s: float | None
    commit: str | None
    dirty: bool | None
    command: str | None
    threads: int | None
    processor: str | None


def run_speed(label: str, run_dir: Path) -> RunSpeed:
    """Tokens/s, seconds per update and what trained the run, from its own files."""
    path = run_dir / METRICS_FILE
    if not path.is_file():
        raise VaswaniError(f"{run_dir}: no {METRICS_FILE}; was it trained by `vaswani train`?")
    records = read_metrics(path)
    if not records:
        raise VaswaniError(f"{path} is empty: the run logged no step; train it longer or give another run")
    train = [r for r in records if r.kind == "train"]
    first = first_training_start(run_dir)
    speed = training_speed(records)
    return RunSpeed(label, str(run_dir), train[-1].step if train else 0, speed.seconds_per_step,
                    speed.tokens_per_s, first.git.commit, first.git.dirty, first.command, first.torch_threads,
                    first.processor)


def run(args: argparse.Namespace) -> int:
    if args.out:
        check_output(args.out, command="bench runs", writes="files", inputs=args.runs, names=RESULT_FILES)
    labels = args.labels or [path.name for path in args.runs]
    if len(labels) != len(args.runs):
        raise VaswaniError(f"--labels names {len(labels)} runs but {len(args.runs)} were given")
    rows = [run_speed(label, path) for label, path in zip(labels, args.runs)]
    base = rows[0].tokens_per_s
    lines = ["| run | commit | updates | tokens/s (median) | s/update | vs first |", "|---|---|---:|---:|---:|---:|"]
    for row in rows:
        ratio = row.tokens_per_s / base if base and row.tokens_per_s else None
        lines.append(f"| {row.label} | `{(row.commit or '?')[:10]}`{' + changes' if row.dirty else ''} | "
                     f"{row.updates:,} | {row.tokens_per_s or 0:,.0f} | {row.seconds_per_step or 0:.3f} | "
                     + (f"{ratio:.2f}×" if ratio else "–") + " |")
        print(lines[-1])
    if args.out:
        record = provenance("cpu")
        atomic_write_json(args.out / RESULT_FILES[0], {**record.to_json(), "runs": [to_json(row) for row in rows]})
        table = "\n".join(["# Training speed of real runs", "", f"Command: `{record.command}`", "",
                           "tokens/s: median over each run's logging windows without an evaluation, from its "
                           "metrics.jsonl; commit and machine from its provenance.jsonl.", "", *lines])
        atomic_write_text(args.out / RESULT_FILES[1], table + "\n")
    return 0
