"""`vaswani bench decode --peer marian ctranslate2` runs end to end on the trained tiny checkpoint: every engine
decodes the same sentences, MarianMT's outputs equal ours, and the results carry their provenance."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("transformers", reason="the peer benchmark needs transformers: pip install 'vaswani[export]'")
pytest.importorskip("ctranslate2", reason="the peer benchmark needs ctranslate2: pip install 'vaswani[export]'")

from vaswani.cli import main  # noqa: E402


def test_peer_decode_benchmark_writes_results(trained_checkpoint: Path, tmp_path: Path, data_dir: Path) -> None:
    out = tmp_path / "export-results"
    assert main(["bench", "decode", "--peer", "marian", "ctranslate2", "--checkpoint", str(trained_checkpoint),
                 "--data-dir", str(data_dir), "--sentences", "4", "--batch-size", "4", "--beams", "2",
                 "--repeats", "1", "--peer-threads", "1", "2", "--profile", "--out", str(out)]) == 0
    report = json.loads((out / "results.json").read_text())
    rows = {(r["engine"], r["search"], r["threads"]): r for r in report["results"]}
    engines = {"ours", "marian", "ctranslate2 float32", "ctranslate2 int8"}
    keys = {(e, s, n) for e in engines for s in ("greedy", "beam 2") for n in (1, 2)}
    assert set(rows) == keys
    for search in ("greedy", "beam 2"):  # the same model and search rules: the same outputs, at any thread count
        for n in (1, 2):
            assert rows["marian", search, n]["tokens"] == rows["ours", search, n]["tokens"]
            assert rows["marian", search, n]["bleu"] == rows["ours", search, n]["bleu"]
            assert rows["ours", search, n]["bleu"] == rows["ours", search, 1]["bleu"]
    # CTranslate2 float32 greedy decodes the same sources (each up to its </s>) with the same rules
    assert rows["ctranslate2 float32", "greedy", 2]["tokens"] == rows["ours", "greedy", 2]["tokens"]
    assert rows["ctranslate2 float32", "greedy", 2]["bleu"] == rows["ours", "greedy", 2]["bleu"]
    assert all(r["sentences"] == 4 and len(r["runs"]) == 1 and r["bleu"] is not None for r in rows.values())
    assert {(r["engine"], r["search"], r["threads"]) for r in report["speed_ratios"]} == {
        k for k in keys if k[0] != "ours"}
    for ratio in report["speed_ratios"]:  # each ratio is the two medians' quotient
        peer = rows[ratio["engine"], ratio["search"], ratio["threads"]]
        ours = rows["ours", ratio["search"], ratio["threads"]]
        assert ratio["ours_over_peer"] == round(peer["median_s"] / ours["median_s"], 3)
    assert {(r["engine"], r["search"]) for r in report["thread_scaling"]} == {(e, s) for e, s, _ in keys}
    assert report["command"].startswith("vaswani") and "commit" in report["git"]
    assert "| marian | greedy | 2 |" in (out / "table.md").read_text()

    # The profile covers the torch engines only, and its kinds account for the profiled pass.
    profiles = report["profile"]
    assert {(p["engine"], p["search"], p["threads"]) for p in profiles} == {
        k for k in keys if k[0] in ("ours", "marian")}
    for p in profiles:
        operators = {o["name"] for o in p["top_operators"]}
        assert p["kinds_ms"]["matrix products"] > 0 and operators & {"aten::addmm", "aten::mm"}
        # self times do not overlap: the operators' kinds add up to no more than the pass's wall clock
        assert 0 < sum(p["kinds_ms"].values()) <= 1.01 * p["wall_ms"]
    text = (out / "profile.md").read_text()
    assert "## greedy, 2 threads" in text and "ours' matrix products alone" in text
