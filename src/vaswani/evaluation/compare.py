"""Side-by-side table of several ``vaswani evaluate`` results (e.g. greedy vs beam, with and without penalties),
written from their results.json files so every number keeps its provenance."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from vaswani.errors import VaswaniError
from vaswani.evaluation.evaluate import EVALUATION_KIND
from vaswani.io import MANIFEST_FILE, atomic_write_text, directory_written_whole, read_json, read_manifest, verify_files


COMPARISON_KIND = "comparison"
NUMBER = (int, float)
# What `vaswani evaluate` writes and the comparison reads, with the type of each value (nested: a dict of the same);
# keys marked "?" may be absent or null, and are checked when present.
FIELDS: dict[str, Any] = {
    "test_set": str, "sentences": int, "checkpoint": str, "signature": str, "command": str,
    "bleu": NUMBER, "chrf": NUMBER, "length_ratio": NUMBER,
    "search": {"beam_size": int, "length_norm": str, "alpha": NUMBER,
               "repetition_penalty?": NUMBER, "no_repeat_ngram?": int},
    "speed": {"sentences_per_second": NUMBER, "target_tokens_per_second": NUMBER},
    "hardware": {"device_name": str, "device": str, "torch_threads": int},
    "git?": {"commit?": (str, type(None))},
}


def load_results(paths: list[Path]) -> list[dict[str, Any]]:
    results = []
    for path in paths:
        file = path / "results.json" if path.is_dir() else path
        if path.is_dir():
            manifest = read_manifest(path)
            if manifest is not None:
                if manifest.kind != EVALUATION_KIND:
                    raise VaswaniError(f"{path} is a {manifest.kind} (see its {MANIFEST_FILE}), not an evaluation; "
                                       "give folders that `vaswani evaluate` wrote")
                verify_files(path, manifest, ["results.json"])
        result = read_json(file, "evaluation results.json")
        problem = results_problem(result)
        if problem:
            raise VaswaniError(f"{file}: not a `vaswani evaluate` results.json ({problem}); give the folder or "
                               "results.json that `vaswani evaluate` wrote")
        results.append({**result, "_path": str(file)})
    return results


def results_problem(result: Any, fields: dict[str, Any] = FIELDS, where: str = "") -> str | None:
    """What makes ``result`` unlike what `vaswani evaluate` writes (the first problem found), or None."""
    if not isinstance(result, dict):
        shape = {list: "an array", str: "a string", bool: "true or false", type(None): "null"}
        return f"{where or 'the file'} is {shape.get(type(result), 'a number')}, not a JSON object"
    for key, kind in fields.items():
        name, optional = key.removesuffix("?"), key.endswith("?")
        if name not in result:
            if optional:
                continue
            return f"no {where}{name!r}"
        value = result[name]
        if value is None and optional:
            continue
        if isinstance(kind, dict):
            problem = results_problem(value, kind, f"{where}{name}.")
            if problem:
                return problem
        elif isinstance(value, bool) or not isinstance(value, kind):
            return f"{where}{name!r} is {_shown(value)}, not {_kind_name(kind)}"
        elif isinstance(value, float) and not math.isfinite(value):
            return f"{where}{name!r} is {value}, not a finite number"
    return None


def _kind_name(kind: Any) -> str:
    kinds = kind if isinstance(kind, tuple) else (kind,)
    names = {int: "a whole number", float: "a number", str: "a string", type(None): "null"}
    return " or ".join(dict.fromkeys(names[k] for k in kinds))


def _shown(value: Any) -> str:
    text = json.dumps(value)
    return text if len(text) <= 40 else text[:37] + "..."


def describe_search(search: dict[str, Any]) -> str:
    parts = ["greedy" if search["beam_size"] == 1 else f"beam {search['beam_size']}"]
    if search["beam_size"] > 1 and search.get("length_norm") != "none":
        parts.append(f"{search['length_norm']} α={search['alpha']}" if search["length_norm"] == "gnmt"
                     else search["length_norm"])
    if search.get("repetition_penalty", 1.0) != 1.0:
        parts.append(f"repetition penalty {search['repetition_penalty']}")
    if search.get("no_repeat_ngram"):
        parts.append(f"no-repeat-{search['no_repeat_ngram']}-gram")
    return ", ".join(parts)


def comparison_table(results: list[dict[str, Any]]) -> str:
    first = results[0]
    lines = [
        f"# Decoding comparison: {first['test_set']} ({first['sentences']} sentences)",
        "",
        f"Checkpoint `{first['checkpoint']}`; device {first['hardware']['device_name']} "
        f"({first['hardware']['device']}, {first['hardware']['torch_threads']} thread(s)).",
        "",
        "| search | BLEU | chrF | length ratio | sentences/s | tokens/s |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        speed = r["speed"]
        lines.append(f"| {describe_search(r['search'])} | {r['bleu']:.2f} | {r['chrf']:.2f} | {r['length_ratio']:.3f} "
                     f"| {speed['sentences_per_second']:.1f} | {speed['target_tokens_per_second']:.0f} |")
    lines += ["", f"BLEU signature: `{first['signature']}`", "", "Commands:", ""]
    lines += [f"- `{r['command']}` (commit `{(r.get('git') or {}).get('commit')}`)" for r in results]
    return "\n".join(lines) + "\n"


def write_comparison(paths: list[Path], out_dir: Path) -> str:
    """Read the evaluations at ``paths`` and write ``table.md`` and ``results.json`` into ``out_dir``, whole (with a
    "comparison" manifest); return the table."""
    results = load_results(paths)
    if not results:
        raise VaswaniError("no results to compare")
    table = comparison_table(results)
    summary = [{"search": describe_search(r["search"]), "bleu": r["bleu"], "chrf": r["chrf"],
                "length_ratio": r["length_ratio"], "speed": r["speed"], "command": r["command"],
                "git": r.get("git"), "results_file": r["_path"]} for r in results]
    with directory_written_whole(out_dir, kind=COMPARISON_KIND) as staging:
        atomic_write_text(staging / "table.md", table)
        atomic_write_text(staging / "results.json", json.dumps(summary, indent=2, ensure_ascii=False) + "\n")
    return table
