"""Side-by-side table of several ``vaswani evaluate`` results (e.g. greedy vs beam, with and without penalties),
written from their results.json files so every number keeps its provenance."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vaswani.errors import VaswaniError
from vaswani.evaluation.evaluate import EVALUATION_KIND, RESULTS_FILE, EvaluationResult
from vaswani.io import (
    MANIFEST_FILE,
    NUMBER,
    atomic_write_text,
    directory_written_whole,
    json_shape_problem,
    read_json,
    read_manifest,
    verify_files,
)
from vaswani.records import from_json, to_json

COMPARISON_KIND = "comparison"
# What `vaswani evaluate` writes and the comparison reads (see vaswani.io.json_shape_problem).
RESULTS_SHAPE: dict[str, Any] = {
    "test_set": str, "sentences": int, "checkpoint": str, "signature": str, "command": str,
    "bleu": NUMBER, "chrf": NUMBER, "length_ratio": NUMBER,
    "search": {"beam_size": int, "length_norm": str, "alpha": NUMBER,
               "repetition_penalty?": NUMBER, "no_repeat_ngram?": int},
    "speed": {"sentences_per_second": NUMBER, "target_tokens_per_second": NUMBER},
    "hardware": {"device_name": str, "device": str, "torch_threads": int},
    "git?": {"commit?": str},
}


@dataclass
class LoadedResult:
    result: EvaluationResult
    path: str  # the results.json it was read from


def load_results(paths: list[Path]) -> list[LoadedResult]:
    results = []
    for path in paths:
        file = path / RESULTS_FILE if path.is_dir() else path
        if path.is_dir():
            manifest = read_manifest(path)
            if manifest is not None:
                if manifest.kind != EVALUATION_KIND:
                    raise VaswaniError(f"{path} is a {manifest.kind} (see its {MANIFEST_FILE}), not an evaluation; "
                                       "give folders that `vaswani evaluate` wrote")
                verify_files(path, manifest)  # the evaluation as it was written, not only the file read here
        values = read_json(file, "evaluation results.json")
        problem = json_shape_problem(values, RESULTS_SHAPE)  # the search settings the table reads, by name
        if problem:
            raise VaswaniError(f"{file}: not a `vaswani evaluate` results.json ({problem}); give the folder or "
                               "results.json that `vaswani evaluate` wrote")
        results.append(LoadedResult(from_json(EvaluationResult, values, str(file)), str(file)))
    return results


def comparison_table(loaded: list[LoadedResult]) -> str:
    first = loaded[0].result
    hardware = first.hardware or {}
    lines = [
        f"# Decoding comparison: {first.test_set} ({first.sentences} sentences)",
        "",
        f"Checkpoint `{first.checkpoint}`; device {hardware.get('device_name')} "
        f"({hardware.get('device')}, {hardware.get('torch_threads')} thread(s)).",
        "",
        "| search | BLEU | chrF | length ratio | sentences/s | tokens/s |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for r in (item.result for item in loaded):
        lines.append(f"| {r.search.summary()} | {r.bleu:.2f} | {r.chrf:.2f} | {r.length_ratio:.3f} "
                     f"| {r.speed.sentences_per_second:.1f} | {r.speed.target_tokens_per_second:.0f} |")
    lines += ["", f"BLEU signature: `{first.signature}`", "", "Commands:", ""]
    lines += [f"- `{r.result.command}` (commit `{(r.result.git or {}).get('commit')}`)" for r in loaded]
    return "\n".join(lines) + "\n"


def write_comparison(paths: list[Path], out_dir: Path) -> str:
    """Read the evaluations at ``paths`` and write ``table.md`` and ``results.json`` into ``out_dir``, whole (with a
    "comparison" manifest); return the table."""
    loaded = load_results(paths)
    if not loaded:
        raise VaswaniError("no results to compare")
    table = comparison_table(loaded)
    summary = [{"search": r.result.search.summary(), "bleu": r.result.bleu, "chrf": r.result.chrf,
                "length_ratio": r.result.length_ratio, "speed": to_json(r.result.speed),
                "command": r.result.command, "git": r.result.git, "results_file": r.path} for r in loaded]
    with directory_written_whole(out_dir, kind=COMPARISON_KIND, writer="compare") as staging:
        atomic_write_text(staging / "table.md", table)
        atomic_write_text(staging / "results.json", json.dumps(summary, indent=2, ensure_ascii=False) + "\n")
    return table
