"""How an experiment writes down what it found, the same way for every experiment.

Each experiment writes one directory (``runs/experiments/<name>/`` by default, ``--out results/<name>`` for the
published one)::

    results.json   raw numbers + the command, git commit, hardware and library versions that produced them
    table.md       the table a reader wants, naming the device that produced it
    *.png          plots (matplotlib, Agg backend: no display needed)

The provenance record is :mod:`vaswani.provenance`'s, so every results file of the project reads the same.
"""

from __future__ import annotations

import datetime
import json
import math
import sys
from pathlib import Path
from typing import Any, Sequence

import torch

from vaswani.io import atomic_write_figure, atomic_write_text
from vaswani.provenance import git_state, hardware, provenance


def device_label(device: torch.device) -> str:
    """A human name for the device: 'NVIDIA H100 80GB HBM3 (cuda)' or 'AMD EPYC (CPU, AVX512-BF16, 2 cores, 2 torch
    threads)', the CPU's class where it is known."""
    info = hardware(device)
    if device.type == "cuda":
        return f"{info.device_name} ({device})"
    kind = f"CPU, {info.cpu_class}" if info.cpu_class else "CPU"
    return f"{info.processor} ({kind}, {info.cpu_count} cores, {info.torch_threads} torch threads)"


def write_results(
    out_dir: Path,
    name: str,
    command: str,
    device: torch.device,
    settings: dict[str, Any],
    results: dict[str, Any],
    table: str,
    figures: dict[str, Any],
    readme: str | None = None,
) -> list[Path]:
    """results.json (provenance + settings + numbers), table.md, one PNG per figure and, when given, README.md
    (the findings, worded from the numbers); returns the paths."""
    import matplotlib.pyplot as plt

    record = provenance(device, command)
    # The commit and the dirty flag also at the top level, where a reader of results.json looks first.
    payload = {"experiment": name, "command": record.command, "commit": record.git.commit,
               "dirty": record.git.dirty, **record.to_json(),
               "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
               "settings": settings, "results": results}
    paths = [out_dir / "results.json", out_dir / "table.md"]
    atomic_write_text(paths[0], json.dumps(_jsonable(payload), indent=2) + "\n")
    atomic_write_text(paths[1], table.rstrip() + "\n")
    if readme is not None:
        paths.append(out_dir / "README.md")
        atomic_write_text(paths[-1], readme.rstrip() + "\n")
    for stem, figure in figures.items():
        path = out_dir / f"{stem}.png"
        atomic_write_figure(path, figure)
        plt.close(figure)
        paths.append(path)
    return paths


def _jsonable(value: Any) -> Any:
    """NaN/inf are not JSON: write them as null so every reader can load the file."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, Path):
        return str(value)
    return value


def pyplot():
    """matplotlib.pyplot on the Agg backend (experiments run on headless machines)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def markdown_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    lines += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def _cell(value: Any) -> str:
    if value is None:
        return "–"
    if isinstance(value, float):
        return f"{value:.3g}" if abs(value) < 1000 else f"{value:,.0f}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def fixed(value: float | None, digits: int = 2) -> str:
    """A number to ``digits`` decimals for a table (BLEU to two, as sacreBLEU prints it; markdown_table's default
    rounding to significant figures would show 13.97 as 14); ``–`` for a missing one."""
    return "–" if value is None else f"{value:.{digits}f}"


def provenance_line(device: torch.device, command: str) -> str:
    git = git_state()
    commit = (git.commit or "unknown")[:12] + (" + uncommitted changes" if git.dirty else "")
    return (f"Measured on **{device_label(device)}**, torch {torch.__version__}, commit `{commit}`.  \n"
            f"Command: `{command}`")


def log(message: str) -> None:
    """Progress lines go to stderr so that stdout stays the summary."""
    print(message, file=sys.stderr, flush=True)
