"""`vaswani bench data`: preparing a WMT-sized corpus and starting to train on it, timed as a user runs them.

    vaswani bench data --pairs 500000 1000000 --work /tmp/scale --out results/data-scale
    vaswani bench data --pairs 4500000 --work /tmp/scale --corpus-only        # only write the synthetic corpus

The corpus is synthetic but made of real text: each line is two Multi30k training captions drawn from a seed, the
German line aligned with the English one (about 26 BPE tokens a side with a 32k vocabulary), so anyone can write
the same one. For each size, in processes of their own as a user types them:

1. ``vaswani prepare --src … --tgt …`` (the tokenizer on its sample, the held-out validation pairs, the cache);
2. ``vaswani train --preset smoke --src … --tgt …`` on that cache, until its first update is logged.

Each is timed on the wall clock, and its peak memory is the largest sum of the resident set sizes of the command
and its worker processes, sampled every 0.2 s (shared pages count once per process: an upper bound). The load
average is read before and after each command, because the machine may be shared. A second call adds its sizes to
the same results file (a size measured again replaces its row), so the large sizes can be run one at a time.
"""

from __future__ import annotations

import argparse
import json
import re
import resource
import shutil
import subprocess
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Sequence

import numpy as np

from vaswani.arguments import ranged
from vaswani.benchmarks.engines import Stamp
from vaswani.data.commands import add_data_dir_argument
from vaswani.data.corpora import load_corpus
from vaswani.data.tokenizer import MAX_VOCAB_SIZE
from vaswani.errors import VaswaniError
from vaswani.io import (
    absolute_path,
    atomic_write,
    atomic_write_figure,
    atomic_write_json,
    atomic_write_text,
    check_output,
)
from vaswani.progress import progress_reporter
from vaswani.provenance import load_averages, provenance
from vaswani.records import read_record, to_json
from vaswani.settings import MAX_COUNT, MAX_LENGTH
from vaswani.tools.data_benchmark_report import (
    OPTIONAL_FIGURES,
    BenchSettings,
    DataScaleResults,
    Measurement,
    Prepared,
    Row,
    Trained,
    render_table,
)

WRITE_CHUNK = 100_000  # lines generated and written at a time
SAMPLE_SECONDS = 0.2
RESULTS, TABLE, PLOT = "results.json", "table.md", "scale.png"
def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--pairs", nargs="+", type=ranged(int, ge=10, le=MAX_COUNT), default=[], metavar="N",
                        help="corpus sizes in sentence pairs, e.g. 500000 1000000 2000000 4500000")
    parser.add_argument("--seed", type=ranged(int, ge=0, le=MAX_COUNT), default=0,
                        help="draws the captions of every line")
    parser.add_argument("--work", type=absolute_path, required=True, metavar="DIR",
                        help="where the corpora, the prepared data and the runs go (several GB at 4.5M pairs)")
    parser.add_argument("--out", type=absolute_path, metavar="DIR",
                        help="write results.json, table.md and scale.png here")
    parser.add_argument("--vocab-size", type=ranged(int, ge=260, le=MAX_VOCAB_SIZE), default=32_000, metavar="N")
    parser.add_argument("--max-len", type=ranged(int, ge=2, le=MAX_LENGTH), default=128, metavar="N")
    parser.add_argument("--corpus-only", action="store_true", help="only write the synthetic corpus files")
    parser.add_argument("--redraw", action="store_true",
                        help="measure nothing: write --out's table.md and scale.png again from its results.json")
    add_data_dir_argument(parser)


def run(args: argparse.Namespace) -> int:
    if args.redraw:
        if args.out is None or not (args.out / RESULTS).is_file():
            raise VaswaniError("--redraw needs --out DIR holding the results.json of an earlier measurement")
        write_results(args.out, [], None)
        return 0
    if not args.pairs:
        raise VaswaniError("give the corpus sizes to measure: --pairs N [N ...]")
    check_output(args.work, command="bench data", writes="files", option="--work", inputs=[args.data_dir])
    if args.out is not None:
        check_output(args.out, command="bench data", writes="files", names=(RESULTS, TABLE, PLOT),
                     inputs=[args.data_dir])
    rows = []
    for pairs in args.pairs:
        src, tgt = write_synthetic_corpus(args.work, pairs, args.seed, args.data_dir)
        print(f"corpus: {src} + {tgt}", file=sys.stderr)
        if args.corpus_only:
            continue
        rows.append(measure(src, tgt, pairs, args.work, args.vocab_size, args.max_len))
        print(format_row(rows[-1]), file=sys.stderr)
    if args.out is not None and rows:
        write_results(args.out, rows, BenchSettings(args.seed, args.vocab_size, args.max_len))
        print(f"wrote {args.out / RESULTS}, {args.out / TABLE}, {args.out / PLOT}")
    return 0


# ---- the corpus ------------------------------------------------------------------------------------------------


def write_synthetic_corpus(work: Path, pairs: int, seed: int = 0,
                           data_dir: str | Path | None = None) -> tuple[Path, Path]:
    """``work/synthetic-{pairs}-seed{seed}.de`` and ``.en``: line i of each is the German (English) captions of the
    same two Multi30k training pairs, drawn from ``seed``. Files already there with the right number of lines are
    kept (they are what this function writes)."""
    paths = tuple(work / f"synthetic-{pairs}-seed{seed}.{lang}" for lang in ("de", "en"))
    if all(path.is_file() and _line_count(path) == pairs for path in paths):
        return paths
    captions = load_corpus("multi30k", "train", data_dir=data_dir)
    sides = ([text.strip() for text in captions.source], [text.strip() for text in captions.target])
    for path, side in zip(paths, sides):
        rng = np.random.default_rng(seed)  # the same draws for both sides: the lines stay aligned

        def write(tmp: str, side: list[str] = side, rng: np.random.Generator = rng,
                  path: Path = path) -> None:
            with open(tmp, "w", encoding="utf-8") as handle, \
                    progress_reporter(pairs, f"writing {path.name}", "lines", leave=False) as bar:
                for start in range(0, pairs, WRITE_CHUNK):
                    drawn = rng.integers(0, len(side), size=(min(WRITE_CHUNK, pairs - start), 2))
                    handle.write("".join(f"{side[a]} {side[b]}\n" for a, b in drawn.tolist()))
                    bar.update(len(drawn))

        work.mkdir(parents=True, exist_ok=True)
        atomic_write(path, write)
    return paths


def _line_count(path: Path) -> int:
    with open(path, "rb") as handle:
        return sum(chunk.count(b"\n") for chunk in iter(lambda: handle.read(1 << 20), b""))


# ---- measuring a command ---------------------------------------------------------------------------------------


def measure(src: Path, tgt: Path, pairs: int, work: Path, vocab_size: int, max_len: int) -> Measurement:
    """Prepare the corpus from nothing, then train on it until the first update: times, peak memory, load before and
    after. Both commands run in ``work/size-PAIRS/``, which the prepared data goes to (``runs/data``, as a user's
    would): what an earlier measurement prepared there is deleted first, so the prepare is never a cache's."""
    src, tgt = src.absolute(), tgt.absolute()  # the commands run in another folder
    files = ["--src", str(src), "--tgt", str(tgt)]
    here = work / f"size-{pairs}"
    prepared = measure_prepare(src, tgt, here, vocab_size, max_len)
    run_dir = here / "run"
    metrics = run_dir / "metrics.jsonl"
    trained = timed_command(["train", "--preset", "smoke", *files, "--run-dir", str(run_dir), "--start-over",
                             "--set", f"data.vocab_size={vocab_size}", "--set", f"data.max_len={max_len}",
                             "--set", "train.max_steps=1", "--set", "train.log_every_steps=1",
                             "--set", "train.bleu_subset=0", "--set", "train.progress=false"], here,
                            event=lambda: _first_update_logged(metrics))
    train = Trained(first_update_seconds=round(trained.event_seconds, 1) if trained.event_seconds else None,
                    peak_gb_until_first_update=round(trained.peak_at_event / 1e9, 3),
                    seconds=round(trained.seconds, 1), cpu_seconds=round(trained.cpu_seconds, 1),
                    peak_gb=round(trained.peak_bytes / 1e9, 3),
                    load_before=trained.load_before, load_after=trained.load_after)
    return Measurement(pairs, prepared, train)


def measure_prepare(src: Path, tgt: Path, here: Path, vocab_size: int, max_len: int) -> Prepared:
    """``vaswani prepare`` of the two files from nothing, in ``here``: wall and CPU seconds, peak memory,
    load, and per phase its wall seconds, CPU seconds and CPU over wall seconds (the cores it kept busy)."""
    shutil.rmtree(here / "runs", ignore_errors=True)
    here.mkdir(parents=True, exist_ok=True)
    prepared = timed_command(["prepare", "--src", str(src.absolute()), "--tgt", str(tgt.absolute()),
                              "--vocab-size", str(vocab_size), "--max-len", str(max_len)], here)
    phases, phase_cpu = (_seconds_by_phase(prepared.stdout, line) for line in ("phases", "phases CPU"))
    if "encoding" not in phases:
        raise VaswaniError(f"vaswani prepare in {here} encoded nothing: it found the data prepared already")
    return Prepared(seconds=round(prepared.seconds, 1), cpu_seconds=round(prepared.cpu_seconds, 1),
                    peak_gb=round(prepared.peak_bytes / 1e9, 3), phases=phases, phase_cpu_seconds=phase_cpu,
                    phase_cpu_over_wall=_cpu_over_wall(prepared.stdout),
                    load_before=prepared.load_before, load_after=prepared.load_after)


def _seconds_by_phase(report: str, line: str) -> dict[str, float]:
    """The seconds of each phase that ``vaswani prepare``'s report gives on its line ``line: reading 1.2 s,
    …``."""
    found = re.findall(rf"^{line}: (.*)$", report, re.M)
    return {name: float(value) for name, value in re.findall(r"(\w+) ([\d.]+) s", found[0] if found else "")}


def _cpu_over_wall(report: str) -> dict[str, float]:
    """Each phase's CPU seconds over its wall seconds, the cores it kept busy, as ``vaswani prepare`` reports
    them (``phases CPU: encoding 80.1 s (1.93 cores)``; a phase too short to say has none)."""
    found = re.findall(r"^phases CPU: (.*)$", report, re.M)
    return {name: float(value) for name, value in re.findall(r"(\w+) [\d.]+ s \(([\d.]+) cores\)",
                                                             found[0] if found else "")}


def _first_update_logged(metrics: Path) -> bool:
    try:
        return any(json.loads(line).get("kind") == "train" for line in metrics.read_text().splitlines() if line)
    except (OSError, ValueError):
        return False


class Timed:
    """What :func:`timed_command` saw of one command."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self.peak_bytes = 0
        self.event_seconds: float | None = None
        self.peak_at_event = 0
        self.stdout = ""
        self.cpu_seconds = 0.0  # user + system time of the command and the workers it waited for
        self.load_before: list[float] = []
        self.load_after: list[float] = []


def timed_command(argv: Sequence[str], cwd: Path, event=None) -> Timed:
    """Run ``vaswani ARGV`` in ``cwd``: its wall time, the peak summed RSS of it and its descendants, and when
    ``event()`` first held (with the peak until then). A failure is a VaswaniError with its last error line."""
    print(f"vaswani {' '.join(argv)}", file=sys.stderr, flush=True)
    timed = Timed()
    timed.load_before = load_averages()
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    process = subprocess.Popen([sys.executable, "-m", "vaswani", *argv], cwd=cwd, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            timed.peak_bytes = max(timed.peak_bytes, tree_rss(process.pid))
            if event is not None and timed.event_seconds is None and event():
                timed.event_seconds = time.perf_counter() - start
                timed.peak_at_event = timed.peak_bytes
            done.wait(SAMPLE_SECONDS)

    errors: list[str] = []

    def relay() -> None:  # the command's progress and messages, shown as they come (its report is on stdout)
        for line in process.stderr:
            errors.append(line)
            print(f"  {line}", end="", file=sys.stderr, flush=True)

    sampler = threading.Thread(target=sample, daemon=True)
    relayed = threading.Thread(target=relay, daemon=True)
    sampler.start()
    relayed.start()
    timed.stdout = process.stdout.read()
    process.wait()
    relayed.join()
    stderr = "".join(errors)
    timed.seconds = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    timed.cpu_seconds = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    done.set()
    sampler.join()
    timed.load_after = load_averages()
    if process.returncode != 0:
        last = (stderr.strip().splitlines() or ["(no message)"])[-1]
        raise VaswaniError(f"vaswani {' '.join(argv[:1])} failed with status {process.returncode}: {last}")
    return timed


def tree_rss(pid: int) -> int:
    """Resident bytes of process ``pid`` and all its descendants (Linux /proc; 0 elsewhere)."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
                parents[int(entry.name)] = int(fields[1])
            except (OSError, IndexError, ValueError):
                continue
    tree, frontier = {pid}, [pid]
    while frontier:
        children = [child for child, parent in parents.items() if parent in frontier and child not in tree]
        tree.update(children)
        frontier = children
    total = 0
    for member in tree:
        try:
            status = Path(f"/proc/{member}/status").read_text()
        except OSError:
            continue
        found = re.search(r"^VmRSS:\s+(\d+) kB", status, re.M)
        total += int(found.group(1)) * 1024 if found else 0
    return total


# ---- results ---------------------------------------------------------------------------------------------------


def format_row(row: Measurement) -> str:
    prepare, train = row.prepare, row.train
    return (f"{row.pairs:>10,} pairs: prepare {prepare.seconds:7.1f} s, peak {prepare.peak_gb:.2f} GB; "
            f"train: first update after {train.first_update_seconds} s, peak "
            f"{train.peak_gb_until_first_update:.2f} GB; load {prepare.load_before} -> {train.load_after}")


def write_results(out: Path, rows: list[Measurement], settings: BenchSettings | None) -> None:
    """Merge ``rows`` into ``out/results.json`` (by size) and write its table and plot (``settings`` None: the
    earlier results' own)."""
    earlier = read_record(DataScaleResults, out / RESULTS) if (out / RESULTS).is_file() else None
    record = provenance("cpu")
    stamp = Stamp(**record.to_json())
    # A row is one size on one machine: rows from other machines stay beside this one's, each naming its machine
    # (a row written without one was measured on the machine that wrote the file it comes from).
    kept: dict[tuple[int, str], Row] = {}
    if earlier is not None:
        earlier_machine = machine_of(earlier.hardware.get("processor"), earlier.hardware.get("cpu_count"))
        kept = {(row.pairs, row.machine or earlier_machine): replace(row, machine=row.machine or earlier_machine)
                for row in earlier.rows}
    machine = machine_of(record.hardware.processor, record.hardware.cpu_count)
    for row in rows:
        kept[(row.pairs, machine)] = Row(
            machine=machine, pairs=row.pairs, prepare=row.prepare, train=row.train, command=record.command,
            commit=record.git.commit, dirty=record.git.dirty, measured=time.strftime("%Y-%m-%d %H:%M"))
    results = DataScaleResults(**vars(stamp), settings=settings or earlier.settings,
                               rows=[kept[key] for key in sorted(kept)])
    written = to_json(results)
    for row in written["rows"]:
        for part in (row["prepare"], row["train"]):
            for name in OPTIONAL_FIGURES:
                if name in part and part[name] is None:
                    del part[name]
    atomic_write_json(out / RESULTS, written)
    atomic_write_text(out / TABLE, render_table(results))
    plot(results.rows, out / PLOT)


def machine_of(processor: str | None, cores: int | None) -> str:
    """The processor and its core count, as a row names the machine it was measured on."""
    return f"{processor or '?'}, {cores or '?'} cores"


def plot(rows: list[Row], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    pairs = [row.pairs / 1e6 for row in rows]
    figure, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    left.plot(pairs, [row.prepare.seconds for row in rows], "o-", label="vaswani prepare (wall)")
    timed = [row for row in rows if row.prepare.cpu_seconds is not None]
    left.plot([row.pairs / 1e6 for row in timed], [row.prepare.cpu_seconds for row in timed], "o--",
              label="vaswani prepare (CPU seconds)")
    left.plot(pairs, [row.train.first_update_seconds or 0 for row in rows], "s-", label="train: first update")
    left.set(xlabel="million sentence pairs", ylabel="seconds", title="time")
    right.plot(pairs, [row.prepare.peak_gb for row in rows], "o-", label="vaswani prepare")
    right.plot(pairs, [row.train.peak_gb_until_first_update for row in rows], "s-", label="train: first update")
    right.set(xlabel="million sentence pairs", ylabel="GB", title="peak memory", ylim=(0, None))
    for axes in (left, right):
        axes.grid(alpha=0.3)
        axes.legend()
    figure.tight_layout()
    atomic_write_figure(path, figure, dpi=110, tight=False)
    plt.close(figure)
