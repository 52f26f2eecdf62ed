"""Run metrics: one JSON line per log/evaluation event, TensorBoard scalars, and the plots drawn from them.

A write the disk refuses is one EnvironmentFault naming the file, wherever it happens: an appended record that
did not fit is cut off again (the log never keeps half a line), the plots are replaced whole, and TensorBoard's
writer thread, whose failure would otherwise print a traceback from inside the thread, hands its error to the next
write in the main thread instead.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vaswani.errors import VaswaniError
from vaswani.io import atomic_write_figure, atomic_write_text, write_faults_named

METRICS_FILE = "metrics.jsonl"
RECORD_START = '{"kind": '  # how every record MetricsLog writes begins (json.dumps, "kind" first)


class MetricsLog:
    """Appends records to ``metrics.jsonl`` and mirrors numeric fields to TensorBoard."""

    def __init__(self, run_dir: Path, tensorboard: bool = True):
        self.path = run_dir / METRICS_FILE
        self.events = run_dir / "tensorboard"
        self.writer = None
        if tensorboard:
            try:
                from torch.utils.tensorboard import SummaryWriter
            except ImportError:  # tensorboard is a dependency, but a stripped install should still train
                return
            _quiet_event_writer_threads()
            with write_faults_named(self.events):
                self.writer = SummaryWriter(log_dir=str(self.events))

    def truncate_after(self, step: int) -> None:
        """On resume, drop records written after the checkpoint we continue from: they will be redone. The lines
        kept are kept as written, every field of them."""
        kept = [line for record, line in _checked_lines(self.path) if record.step <= step]
        atomic_write_text(self.path, "".join(line + "\n" for line in kept))

    def write(self, kind: str, step: int, **values: Any) -> None:
        record = {"kind": kind, "step": step, **values}
        with write_faults_named(self.path), self.path.open("ab") as handle:
            size = handle.tell()
            try:
                handle.write((json.dumps(record) + "\n").encode("utf-8"))
                handle.flush()
            except BaseException:
                handle.truncate(size)  # no half record: the log stays a list of whole lines
                raise
        if self.writer is not None:
            with write_faults_named(self.events):
                for key, value in values.items():
                    if isinstance(value, (int, float)) and not isinstance(value, bool):
                        self.writer.add_scalar(f"{kind}/{key}", value, step)
                self.writer.flush()

    def close(self) -> None:
        if self.writer is not None:
            writer, self.writer = self.writer, None
            with write_faults_named(self.events):
                writer.close()


_quieted = threading.Lock()
_quiet = False


def _quiet_event_writer_threads() -> None:
    """Let TensorBoard's writer thread fail silently: it keeps its exception and the next write or flush in the main
    thread raises it (tensorboard's own design), where it becomes one line. Without this, threading's default hook
    prints the thread's traceback first. Other threads' failures are reported as before."""
    global _quiet
    with _quieted:
        if _quiet:
            return
        previous = threading.excepthook

        def hook(args: threading.ExceptHookArgs) -> None:
            if type(args.thread).__module__.startswith("tensorboard.") and isinstance(args.exc_value, Exception):
                return
            previous(args)

        threading.excepthook = hook
        _quiet = True


# Fields the trainer writes as numbers in its "train" and "valid" records (null where it has none, e.g. bleu).
NUMERIC_FIELDS = ("epoch", "loss", "nll", "accuracy", "lr", "grad_norm", "tokens_per_s", "elapsed_s", "mfu", "bleu")


@dataclass(frozen=True)
class MetricsRecord:
    """One checked line of ``metrics.jsonl``: its kind ("train", "valid", "nonfinite"), its update step, and the
    numbers of :data:`NUMERIC_FIELDS` that a "train" or "valid" record holds (None where it has none)."""

    kind: str
    step: int
    epoch: float | None = None
    loss: float | None = None
    nll: float | None = None
    accuracy: float | None = None
    lr: float | None = None
    grad_norm: float | None = None
    tokens_per_s: float | None = None
    elapsed_s: float | None = None
    mfu: float | None = None
    bleu: float | None = None


def read_metrics(path: Path) -> list[MetricsRecord]:
    """The records of ``metrics.jsonl``, each checked (see :func:`metrics_record_problem`); a torn last line (the
    process was killed while appending it: the start of a record) is dropped. Any other damaged line is a
    VaswaniError naming ``path:line``, so no reader of the log meets a record it cannot use."""
    return [record for record, _ in _checked_lines(path)]


def _checked_lines(path: Path) -> list[tuple[MetricsRecord, str]]:
    if not path.is_file():
        return []
    lines = [(number, line) for number, line in
             enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), start=1) if line.strip()]
    records = []
    for index, (number, line) in enumerate(lines):
        try:
            record = json.loads(line)
        except ValueError:  # not JSON (json.JSONDecodeError), or a whole number too long for Python to read
            # torn: the start of one record. A line holding two record starts is two records run together, damage.
            if index == len(lines) - 1 and line.startswith(RECORD_START) and line.count(RECORD_START) == 1:
                continue
            raise VaswaniError(f"{path}:{number}: not a JSON record; the metrics log is damaged") from None
        problem = metrics_record_problem(record)
        if problem:
            raise VaswaniError(f"{path}:{number}: not a metrics record ({problem}); the metrics log is damaged")
        numbers = {name: record.get(name) for name in NUMERIC_FIELDS} if record["kind"] in ("train", "valid") else {}
        records.append((MetricsRecord(record["kind"], record["step"], **numbers), line))
    return records


def metrics_record_problem(record: Any) -> str | None:
    """What makes ``record`` unlike the trainer's records, or None: an object with a string "kind", a whole
    "step" >= 0 and, in "train" and "valid" records, numbers (or null) in the :data:`NUMERIC_FIELDS`."""
    if not isinstance(record, dict):
        shape = {list: "an array", str: "a string", bool: "true or false", type(None): "null"}
        return f"{shape.get(type(record), 'a number')}, not a JSON object"
    for name in ("kind", "step"):
        if name not in record:
            return f'no "{name}"'
    if not isinstance(record["kind"], str):
        return f'"kind" is {_shown(record["kind"])}, not a string'
    step = record["step"]
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
        return f'"step" is {_shown(step)}, not a whole number >= 0'
    if record["kind"] in ("train", "valid"):
        for name in NUMERIC_FIELDS:
            value = record.get(name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
                return f'"{name}" is {_shown(value)}, not a number'
    return None


def _shown(value: Any) -> str:
    text = json.dumps(value)
    return text if len(text) <= 40 else text[:37] + "..."


@dataclass(frozen=True)
class TrainingSpeed:
    """Medians over a run's logging windows; None where the log holds no window to measure."""

    seconds_per_step: float | None
    tokens_per_s: float | None


def training_speed(records: list[MetricsRecord]) -> TrainingSpeed:
    """Median seconds per update and tokens/s over the logging windows that contain no evaluation (the
    trainer evaluates right after logging a step, so the window that starts there includes the evaluation)."""
    train = [r for r in records if r.kind == "train"]
    eval_steps = {r.step for r in records if r.kind == "valid"}
    seconds = []
    for start, end in zip(train, train[1:]):
        if any(start.step <= s < end.step for s in eval_steps) or end.step <= start.step:
            continue
        if start.elapsed_s is None or end.elapsed_s is None:  # a log older than the field
            continue
        seconds.append((end.elapsed_s - start.elapsed_s) / (end.step - start.step))
    rates = [r.tokens_per_s for r in train if r.tokens_per_s]
    return TrainingSpeed(_median(seconds), _median(rates))


def _median(values: list[float]) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2


def plot_run(run_dir: Path) -> list[Path]:
    """Train/validation loss, learning rate and validation BLEU, redrawn from ``metrics.jsonl``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    records = read_metrics(run_dir / METRICS_FILE)
    train = [r for r in records if r.kind == "train"]
    valid = [r for r in records if r.kind == "valid"]
    out_dir = run_dir / "plots"
    with write_faults_named(out_dir):
        out_dir.mkdir(exist_ok=True)
    written = []

    fig, ax = plt.subplots(figsize=(6, 4))
    if train:
        ax.plot([r.step for r in train], [r.loss for r in train], label="train (label-smoothed)", alpha=0.7)
    if valid:
        ax.plot([r.step for r in valid], [r.loss for r in valid], "o-", label="validation (label-smoothed)")
        ax.plot([r.step for r in valid], [r.nll for r in valid], "s--", label="validation NLL")
    ax.set(xlabel="update step", ylabel="loss per target token", title="Loss")
    ax.grid(alpha=0.3)
    ax.legend()
    written.append(_save(fig, out_dir / "loss.png"))

    fig, ax = plt.subplots(figsize=(6, 4))
    if train:
        ax.plot([r.step for r in train], [r.lr for r in train])
    ax.set(xlabel="update step", ylabel="learning rate", title="Learning-rate schedule")
    ax.grid(alpha=0.3)
    written.append(_save(fig, out_dir / "lr.png"))

    with_bleu = [r for r in valid if r.bleu is not None]
    fig, ax = plt.subplots(figsize=(6, 4))
    if with_bleu:
        ax.plot([r.epoch for r in with_bleu], [r.bleu for r in with_bleu], "o-")
    ax.set(xlabel="epoch", ylabel="BLEU (greedy, validation subset)", title="Validation BLEU")
    ax.grid(alpha=0.3)
    written.append(_save(fig, out_dir / "bleu.png"))
    return written


def _save(fig: Any, path: Path) -> Path:
    import matplotlib.pyplot as plt

    fig.tight_layout()
    atomic_write_figure(path, fig, dpi=110, tight=False)  # replaced whole, never left half-drawn on a full disk
    plt.close(fig)
    return path
