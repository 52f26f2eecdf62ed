"""`vaswani experiment recipe`: one row per variant with its seed-noise column, findings that follow the numbers,
custom variants that reach the run's config, and malformed ones refused by name."""

from __future__ import annotations

import json

import pytest
import yaml

from vaswani.cli import main
from vaswani.errors import ConfigError
from vaswani.experiments.recipe import (
    BASELINE,
    NOISE,
    RECIPE,
    VARIANTS,
    ProxyResult,
    findings,
    parse_run_variant,
    proxy_settings,
)
from vaswani.experiments.variants import variant_config


def test_a_smoke_study_writes_one_row_per_variant_and_a_custom_variant_reaches_its_run(tmp_path, data_dir,
                                                                                       monkeypatch) -> None:
    monkeypatch.setenv("VASWANI_CACHE", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)
    out, runs = tmp_path / "recipe", tmp_path / "runs"
    code = main(["experiment", "recipe", "--smoke", "--out", str(out), "--runs-dir", str(runs), "--data-dir",
                 str(data_dir), "--variant", "narrow-ff:model.d_ff=32", "--device", "cpu"])
    assert code == 0
    results = json.loads((out / "results.json").read_text())["results"]
    rows = {row["variant"]: row for row in results["rows"]}
    assert set(rows) == {BASELINE, NOISE, "dropout-0.2", "narrow-ff"}
    assert results["seed_noise_bleu"] == pytest.approx(abs(rows[BASELINE]["val_bleu"] - rows[NOISE]["val_bleu"]))
    assert rows[BASELINE]["delta_bleu"] == 0.0
    assert yaml.safe_load((runs / "narrow-ff" / "config.yaml").read_text())["model"]["d_ff"] == 32
    assert yaml.safe_load((runs / "dropout-0.2" / "config.yaml").read_text())["model"]["dropout"] == 0.2
    assert "Δ / seed noise" in (out / "table.md").read_text()
    assert (out / "bleu_vs_minutes.png").stat().st_size > 0 and (out / "README.md").is_file()


def _row(name: str, bleu: float, tokens_per_s: float = 2000.0) -> ProxyResult:
    return ProxyResult(name, name, [], updates=100, epochs=1.0, minutes=7.0, tokens_per_s=tokens_per_s,
                       parameters=1000, warmup_steps=400, val_nll=2.0, val_bleu=bleu, val_chrf=50.0,
                       length_ratio=1.0, reused=False, delta_bleu=bleu - 30.0)


def test_the_findings_read_each_difference_against_the_seed_noise() -> None:
    rows = [_row(BASELINE, 30.0), _row(NOISE, 29.5), _row("better", 31.0), _row("same", 30.3), _row("worse", 28.0)]
    text = findings(rows, noise=0.5, minutes=7)
    gains, within, losses = (line for line in text.splitlines() if line.startswith("- **"))
    assert "better" in gains and "same" not in gains and "worse" not in gains
    assert "same" in within and "better" not in within
    assert "worse" in losses and "+1.00 BLEU" in gains and "-2.00 BLEU" in losses
    assert "0.50 BLEU" in text and "7 minutes" in text
    assert "no difference can be read" in findings([_row("better", 31.0)], noise=None, minutes=7)
    assert "inside its 400-update warmup" in text  # 100 updates < 400
    assert "Same model size" not in text
    slowed = findings([*rows[:4], _row("worse", 28.0, tokens_per_s=1500.0)], noise=0.5, minutes=7)
    assert "worse (1,500 vs 2,000)" in slowed


def test_every_built_in_variant_is_a_valid_run_of_the_real_recipe() -> None:
    extra = proxy_settings(6, smoke=False, settings=[])
    for variant in VARIANTS.values():
        train = variant_config(RECIPE, variant, extra).train
        assert train.max_minutes == 6 and train.final_model is False


@pytest.mark.parametrize("spec", ["nocolon", "name:", ":model.d_ff=3", "name:d_ff=3", "name:model.d_ff"])
def test_a_malformed_variant_is_refused_naming_it(spec: str) -> None:
    with pytest.raises(ConfigError, match="--variant"):
        parse_run_variant(spec)
    assert parse_run_variant("wide:model.d_ff=1024,model.dropout=0.2").settings == ("model.d_ff=1024",
                                                                                 "model.dropout=0.2")
    assert parse_run_variant("adam:train.betas=0.9,0.995").settings == ("train.betas=0.9,0.995",)


def test_an_invalid_setting_in_a_variant_is_refused_before_any_run(tmp_path, data_dir) -> None:
    with pytest.raises(ConfigError, match="model.dropout"):
        main(["--debug", "experiment", "recipe", "--smoke", "--out", str(tmp_path / "o"), "--runs-dir",
              str(tmp_path / "r"), "--variants", BASELINE, "--variant", "bad:model.dropout=2"])
    assert not (tmp_path / "r").exists()
