"""serve-bench's harness: thread layouts named WxPxT, every split of the cores, the flags each server gets, and the
report's figures read from the runs (ratios per repeat, the targets with the ceiling that bounds them)."""

from __future__ import annotations

import pytest

from vaswani.errors import ConfigError
from vaswani.provenance import provenance
from vaswani.tools.serve_ceilings import BareRun, ModelAlone
from vaswani.tools.serve_layouts import Layout, layouts_for
from vaswani.tools.serve_load import LoadTest, Run
from vaswani.tools.serve_report import summarise, table


def test_a_layout_is_workers_by_parallel_batches_by_threads_and_becomes_server_flags() -> None:
    layout = Layout.parse("2x1x3")
    assert (layout.workers, layout.parallel_batches, layout.threads, layout.total_threads) == (2, 1, 3, 6)
    assert layout.flags() == ["--workers", "2", "--parallel-batches", "1", "--threads", "6"]
    assert layout.name == "2x1x3"
    for bad in ("2x1", "0x1x1", "axbxc", "1x1x1x1"):
        with pytest.raises(ConfigError, match=f"--layouts {bad}: not WORKERSxPARALLEL_BATCHESxTHREADS"):
            Layout.parse(bad)


def test_every_split_of_the_cores_is_compared_with_one_thread_alone() -> None:
    assert [layout.name for layout in layouts_for(2)] == ["1x1x1", "1x1x2", "1x2x1", "2x1x1"]
    four = layouts_for(4)
    assert {layout.total_threads for layout in four[1:]} == {4} and len(four) == len(set(four)) == 7


def _run(server: str, clients: int, repeat: int, per_s: float, p95: float) -> Run:
    return Run(server, clients, repeat, int(per_s * 10), 10.0, per_s, p95 / 2, p95, p95 * 1.2, 0, [], 1.0)


def test_the_report_reads_ratios_per_repeat_and_states_each_target_with_its_ceiling() -> None:
    runs = [_run("batching", 1, 0, 50, 20), _run("no batching", 1, 0, 40, 22),
            _run("batching", 1, 1, 44, 24), _run("no batching", 1, 1, 55, 21),
            _run("batching", 8, 0, 100, 90), _run("no batching", 8, 0, 80, 110),
            _run("batching", 8, 1, 110, 100), _run("no batching", 8, 1, 70, 120)]
    layout_runs = [_run("1x2x1", 8, 0, 120, 80), _run("1x2x1", 8, 1, 100, 90),
                   _run("1x1x2", 8, 0, 90, 95), _run("1x1x2", 8, 1, 80, 99)]
    bare = [BareRun("2x1, sorted", 0, 8, 1000, 5.0, 200.0), BareRun("2x1, in arrival order", 0, 8, 1000, 8.0, 125.0),
            BareRun("1x2, in arrival order", 0, 8, 1000, 10.0, 100.0)]
    test = LoadTest(provenance("cpu"), {"beam": 4, "seconds_per_run": 10.0, "repeats": 2, "cores_visible": 2,
                                        "layouts": ["1x2x1", "1x1x2"]},
                    {"engine": "ctranslate2", "quantization": "int8", "device": "cpu", "workers": 1,
                     "parallel_batches": 2, "threads": 1},
                    runs, [_run("health", 8, 0, 900, 20)], layout_runs, bare, [ModelAlone(8, 160.0, 40, 320)], [])
    summary = summarise(test)
    one = next(row for row in summary.rows if row.server == "batching" and row.clients == 1)
    assert one.ratio == pytest.approx((50 / 40 + 44 / 55) / 2) and one.ratio_range == (44 / 55, 50 / 40)
    best = summary.layout_rows[0]
    assert best.server == "1x2x1" and best.ratio == pytest.approx(110 / 125)
    assert summary.bare == {"2x1, sorted": 200.0, "2x1, in arrival order": 125.0, "1x2, in arrival order": 100.0}
    checks = "\n".join(summary.checks)
    assert "1 client: batching serves 1.02× what no batching serves (per-repeat 0.80–1.25" in checks
    assert "the repeats straddle it" in checks
    # 8 clients at 160 sentences/s without HTTP: Little's law says they wait 8 / 160 = 50 ms on average
    assert "8 clients: p95 95 ms, 4.32× the one-client p95 of 22 ms" in checks
    assert "8 / 160 = 50 ms on average, 2.27× the one-client p95" in checks
    assert ("the best thread layout, 1x2x1, serves 110.0 sentences/s, 0.88× the bare CTranslate2 script's 125.0 in "
            "batches of 8 (2x1, in arrival order, inter × intra threads; target ≥ 0.9×) and 0.55× its best, 200.0 "
            "(2x1, sorted)") in checks
    text = table(test, summary)
    assert "| 1x2x1 | 8 | 110.00 (100.00–120.00) | 0.88× (0.80–0.96) |" in text
    assert "load average (1 minute, every job on it) at the end of the runs: 1.0–1.0 on 2 cores" in text


def test_layouts_none_skips_the_comparison_and_the_torch_engine_leaves_out_parallel_batches() -> None:
    from vaswani.tools.serve_layouts import parse_layouts, runnable_layouts

    assert parse_layouts(None) is None and parse_layouts(["none"]) == parse_layouts([]) == []
    assert [layout.name for layout in parse_layouts(["1x2x1", "2x1x1"])] == ["1x2x1", "2x1x1"]
    layouts = layouts_for(2)
    kept, left_out = runnable_layouts(layouts, "torch")
    assert [layout.name for layout in kept] == ["1x1x1", "1x1x2", "2x1x1"]
    assert [layout.name for layout in left_out] == ["1x2x1"]
    assert runnable_layouts(layouts, "ctranslate2") == (layouts, [])


def test_serve_bench_takes_layouts_none(monkeypatch, tmp_path, tiny_checkpoint) -> None:
    from vaswani.cli import main
    from vaswani.tools import serve_load

    seen = {}
    monkeypatch.setattr(serve_load, "run_load_test", lambda *args, **kwargs: seen.update(kwargs))
    assert main(["serve-bench", "--checkpoint", str(tiny_checkpoint), "--layouts", "none",
                 "--out", str(tmp_path / "bench")]) == 0
    assert seen["layouts"] == []
