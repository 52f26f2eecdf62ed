"""`vaswani bench decode --peer marian ctranslate2` runs end to end on the trained tiny checkpoint: every engine
decodes the same sentences, MarianMT's outputs equal ours, and the results carry their provenance."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("transformers", reason="the peer benchmark needs transformers: pip install 'vaswani[export]'")
pytest.importorskip("ctranslate2", reason="the peer benchmark needs ctranslate2: pip install 'vaswani[export]'")

from vaswani.benchmarks.decode_peers_report import PeersReport, render_profile, render_table  # noqa: E402
from vaswani.cli import main  # noqa: E402


def test_peer_decode_benchmark_writes_results(trained_checkpoint: Path, tmp_path: Path, data_dir: Path) -> None:
    out = tmp_path / "export-results"
    assert main(["bench", "decode", "--peer", "marian", "ctranslate2", "--checkpoint", str(trained_checkpoint),
                 "--data-dir", str(data_dir), "--sentences", "4", "--batch-size", "4", "--beams", "2",
                 "--repeats", "1", "--peer-threads", "1", "2", "--profile", "--profile-passes", "1",
                 "--out", str(out)]) == 0
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
    assert {(r["ours"], r["engine"], r["search"], r["threads"]) for r in report["speed_ratios"]} == {
        ("ours", *k) for k in keys if k[0] != "ours"}
    for ratio in report["speed_ratios"]:  # each ratio is the two medians' quotient
        peer = rows[ratio["engine"], ratio["search"], ratio["threads"]]
        ours = rows[ratio["ours"], ratio["search"], ratio["threads"]]
        assert ratio["ours_over_peer"] == round(peer["median_s"] / ours["median_s"], 3)
    assert {(r["engine"], r["search"]) for r in report["thread_scaling"]} == {(e, s) for e, s, _ in keys}
    assert report["command"].startswith("vaswani") and "commit" in report["git"]
    assert "| marian | greedy | 2 |" in (out / "table.md").read_text()
    assert render_table(PeersReport.read(out / "results.json")) == (out / "table.md").read_text()

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
    assert "## greedy, 2 threads" in text
    assert set(report["matmul_peak_gflops"]) == {"1", "2"} and all(p["passes"] == 1 for p in profiles)
    assert "- ours' matrix products ran at " in text and "ours would run at most at " in text
    assert "× marian's speed (marian's unprofiled median" in text
    assert "× ctranslate2 float32's speed (ctranslate2 float32's unprofiled median" in text
    assert render_profile(PeersReport.read(out / "results.json")) == text


def test_each_of_our_engines_is_compared_with_each_peer() -> None:
    """With --compile the table carries, per peer, the ratio of our eager and of our compiled engine."""
    from types import SimpleNamespace

    from vaswani.benchmarks.decode_peers import Row, _report
    from vaswani.benchmarks.decode_peers_report import OURS, OURS_COMPILED, RandomModel, render_table

    def row(engine: str, seconds: float) -> Row:
        return Row(engine, "greedy", 2, 8, runs=[seconds, seconds], tokens=80, bleu=30.0)

    args = SimpleNamespace(sentences=8, batch_size=8, repeats=2, output_len=32, profile_passes=1)
    model_info = RandomModel(True, {"d_model": 8, "n_encoder_layers": 1, "n_decoder_layers": 1, "n_heads": 2,
                                    "d_ff": 16, "vocab_size": 40, "norm": "post", "positions": "sinusoidal",
                                    "attention": "sdpa"})
    report = _report(args, model_info, [row(OURS, 1.0), row(OURS_COMPILED, 0.8), row("marian", 1.2)], True, [2], [], {})
    assert {(r.ours, r.engine): r.ours_over_peer for r in report.speed_ratios} == {
        (OURS, "marian"): 1.2, (OURS_COMPILED, "marian"): 1.5}
    table = render_table(report)
    assert f"ours ÷ engine ({OURS} / {OURS_COMPILED})" in table
    assert "| marian | greedy | 2 | 6.7 | 6.7–6.7 | 80 | 30.0 | 1.20× / 1.50× |" in table
    assert "our compiled decoding step runs at 1.25× the sentences/s of our eager one, with the same outputs" in table
