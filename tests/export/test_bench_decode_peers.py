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
                 "--repeats", "1", "--out", str(out)]) == 0
    report = json.loads((out / "results.json").read_text())
    rows = {(r["engine"], r["search"]): r for r in report["results"]}
    engines = {"ours", "marian", "ctranslate2 float32", "ctranslate2 int8"}
    assert set(rows) == {(e, s) for e in engines for s in ("greedy", "beam 2")}
    for search in ("greedy", "beam 2"):  # the same model and search rules: the same outputs
        assert rows["marian", search]["tokens"] == rows["ours", search]["tokens"]
        assert rows["marian", search]["bleu"] == rows["ours", search]["bleu"]
    # CTranslate2 float32 greedy decodes the same sources (each up to its </s>) with the same rules
    assert rows["ctranslate2 float32", "greedy"]["tokens"] == rows["ours", "greedy"]["tokens"]
    assert rows["ctranslate2 float32", "greedy"]["bleu"] == rows["ours", "greedy"]["bleu"]
    assert all(r["sentences"] == 4 and len(r["runs"]) == 1 and r["bleu"] is not None for r in rows.values())
    assert set(report["speed_ratios_ours_over_peer"]) == {f"ours / {e}, {s}" for e in engines - {"ours"}
                                                          for s in ("greedy", "beam 2")}
    assert report["command"].startswith("vaswani") and "commit" in report["git"]
    assert "| marian | greedy |" in (out / "table.md").read_text()
