"""`vaswani experiment regularization`: cells named by what they change, whole schedules by epochs without a clock,
one row per cell over its seeds, findings per width."""

from __future__ import annotations

import pytest
import yaml

from vaswani.errors import ConfigError
from vaswani.experiments.regularization import (
    GRID,
    RECIPE,
    Cell,
    CellSummary,
    RunResult,
    findings,
    study_settings,
    study_variants,
    summarize,
    table,
)
from vaswani.experiments.variants import variant_config
from vaswani.training.summary import Stop


def test_a_cell_name_says_every_setting_it_changes() -> None:
    assert Cell("d128").settings == ()
    assert Cell("d256-drop0.3-attn0.1-ls0.2-v6000-split0.1").settings == (
        "model.d_model=256", "model.d_ff=1024", "train.lr=0.001", "model.dropout=0.3", "model.attention_dropout=0.1",
        "train.label_smoothing=0.2", "data.vocab_size=6000", "data.subword_split=0.1")
    for bad in ("d100", "d128-dropout", "d128-xy0.3", "d128-drop"):
        with pytest.raises(ConfigError, match=bad.split("-")[-1] if "-" in bad else bad):
            Cell(bad).settings


def test_every_cell_of_the_grid_is_a_valid_whole_schedule_of_the_real_recipe_without_a_clock() -> None:
    extra = study_settings(smoke=False, settings=[])
    for variant in study_variants(GRID, seeds=[0, 1]):
        train = variant_config(RECIPE, variant, extra).train
        assert train.max_minutes is None and not train.decay_on_clock and not train.scale_up_models
        assert train.max_epochs == 40 and train.patience is None and train.precision == "fp32"
        assert train.seed == int(variant.name[-1])
    assert variant_config(RECIPE, study_variants(["d128-drop0.3"], [0])[0], extra).model.dropout == 0.3


def test_a_smoke_study_trains_each_cell_and_seed_and_writes_one_row_per_cell(tmp_path, data_dir, monkeypatch,
                                                                            experiment) -> None:
    monkeypatch.setenv("VASWANI_CACHE", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)
    runs = tmp_path / "runs"
    payload = experiment("regularization", tmp_path / "out", "--smoke", "--seeds", "0", "1", "--runs-dir", str(runs),
                         "--data-dir", str(data_dir))
    results = payload["results"]
    assert {(r["cell"], r["seed"]) for r in results["runs"]} == {(c, s) for c in ("d128", "d128-drop0.3")
                                                                 for s in (0, 1)}
    assert yaml.safe_load((runs / "d128-drop0.3-seed1" / "config.yaml").read_text())["model"]["dropout"] == 0.3
    assert [c["cell"] for c in results["cells"]] == ["d128", "d128-drop0.3"]
    assert all(c["seeds"] == 2 and len(r["curve"]) >= 2 for c in results["cells"] for r in results["runs"])
    assert "Seed spread" in (tmp_path / "out" / "README.md").read_text()

    # Read as they stand: a run cut off counts as in progress, a cell with no run yet is left out, nothing trains.
    summary_file = runs / "d128-drop0.3-seed1" / "summary.json"
    summary_file.write_text(summary_file.read_text().replace(f'"{Stop.MAX_STEPS.value}"', '"interrupted"'))
    payload = experiment("regularization", tmp_path / "interim", "--smoke", "--seeds", "0", "1", "--runs-dir",
                         str(runs), "--data-dir", str(data_dir), "--as-they-stand", "--cells", "d128-drop0.3",
                         "d128-drop0.2")
    assert not (runs / "d128-drop0.2-seed0").exists()
    assert [(r["seed"], r["finished"]) for r in payload["results"]["runs"]] == [(0, True), (1, False)]
    assert "(in progress)" in (tmp_path / "interim" / "table.md").read_text()
    assert "**Interim**: d128-drop0.3 still training" in (tmp_path / "interim" / "README.md").read_text()


def test_the_findings_name_the_best_cell_of_each_width() -> None:
    def cell(name: str, bleu: float, seeds: int = 1) -> CellSummary:
        return CellSummary(name, seeds, bleu, 0.4 if seeds > 1 else None, 1.7, 1.75, 0.03, 12.0, 40.0)

    text = findings([cell("d128", 39.0, 2), cell("d128-drop0.3", 40.5), cell("d256-drop0.3", 41.0)])
    assert "**d128**: best d128-drop0.3 at 40.50" in text and "d128 39.00" in text
    assert "**d256**: best d256-drop0.3" in text and "**d192**" not in text
    assert "0.40 BLEU" in text and "3.0 % above its minimum" in text


def test_a_cell_with_one_seed_shows_no_spread_and_two_seeds_show_theirs() -> None:
    def run(cell: str, seed: int, bleu: float) -> RunResult:
        return RunResult(cell, seed, epochs=4.0, updates=40, best_nll=2.0, best_nll_epoch=3.0, last_nll=2.1,
                         val_bleu=bleu, curve=[])

    cells = summarize([run("d128", 0, 30.0), run("d128", 1, 31.5), run("d256", 0, 29.0)])
    assert [(c.cell, c.seeds, c.bleu_spread) for c in cells] == [("d128", 2, 1.5), ("d256", 1, None)]
    rows = table(cells, "", []).splitlines()
    assert rows[4].startswith("| d128 | 2 | 30.75 | 1.50 |") and rows[5].startswith("| d256 | 1 | 29.00 | – |")
    assert "**1.50 BLEU**" in findings(cells)
