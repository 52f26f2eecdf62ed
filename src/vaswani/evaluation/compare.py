"""Side-by-side table of several ``vaswani evaluate`` results (e.g. greedy vs beam, with and without penalties),
written from their results.json files so every number keeps its provenance."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from vaswani.errors import VaswaniError


# What `vaswani evaluate` writes and the comparison reads: (key, type, keys of a nested dict).
REQUIRED = (("test_set", str, ()), ("sentences", int, ()), ("checkpoint", str, ()), ("signature", str, ()),
            ("command", str, ()), ("bleu", (int, float), ()), ("chrf", (int, float), ()),
            ("length_ratio", (int, float), ()),
            ("search", dict, ("beam_size", "length_norm", "alpha")),
            ("speed", dict, ("sentences_per_second", "target_tokens_per_second")),
            ("hardware", dict, ("device_name", "device", "torch_threads")))


def load_results(paths: list[Path]) -> list[dict[str, Any]]:
    results = []
    for path in paths:
        file = path / "results.json" if path.is_dir() else path
        try:
            result = json.loads(file.read_text(encoding="utf-8"))
        except (OSError, ValueError) as error:  # ValueError: bad JSON or bad UTF-8
            reason = getattr(error, "strerror", None) or str(error)
            raise VaswaniError(f"{file}: not a readable evaluation results.json ({reason})") from None
        problem = _missing(result)
        if problem:
            raise VaswaniError(f"{file}: not a `vaswani evaluate` results.json ({problem}); give the folder or "
                               "results.json that `vaswani evaluate` wrote")
        results.append({**result, "_path": str(file)})
    return results


def _missing(result: Any) -> str | None:
    if not isinstance(result, dict):
        return f"a JSON {type(result).__name__}, not an object"
    for key, kind, inner in REQUIRED:
        if not isinstance(result.get(key), kind) or isinstance(result.get(key), bool):
            return f"no {key!r} of the right type"
        missing = [k for k in inner if k not in result[key]]
        if missing:
            return f"{key!r} lacks {missing}"
    return None


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
    results = load_results(paths)
    if not results:
        raise VaswaniError("no results to compare")
    out_dir.mkdir(parents=True, exist_ok=True)
    table = comparison_table(results)
    (out_dir / "table.md").write_text(table, encoding="utf-8")
    summary = [{"search": describe_search(r["search"]), "bleu": r["bleu"], "chrf": r["chrf"],
                "length_ratio": r["length_ratio"], "speed": r["speed"], "command": r["command"],
                "git": r.get("git"), "results_file": r["_path"]} for r in results]
    (out_dir / "results.json").write_text(json.dumps(summary, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return table
