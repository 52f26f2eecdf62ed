"""`vaswani experiment fine-tuning`: each condition is the run it claims to be, and a smoke study trains a parent,
fine-tunes it on a news set and scores every model on the same three sets."""

from __future__ import annotations

from pathlib import Path

import yaml

from vaswani.experiments.fine_tuning import CONDITIONS, STUDY_SETTINGS, condition_variants, news_files
from vaswani.experiments.variants import RunVariant, variant_config


def test_each_condition_trains_what_its_name_says(data_dir: Path) -> None:
    files = news_files(data_dir, smoke=False)
    variants = {v.name: v for v in condition_variants(CONDITIONS, Path("/parent"), files, 5, Path("runs"))}
    assert set(variants) == set(CONDITIONS)  # a given parent is not trained
    configs = {name: variant_config("multi30k-cpu", variant, STUDY_SETTINGS) for name, variant in variants.items()}
    tuned, decoder = configs["fine-tuned"], configs["fine-tuned-decoder"]
    assert tuned.train.init_from == "/parent" and tuned.train.max_epochs == 5
    assert tuned.train.lr == 0.0003 and tuned.train.freeze != "encoder"
    assert decoder.train.freeze == "encoder"
    assert len(tuned.data.train_files) == 8 and tuned.data.valid_files[0].endswith("newstest2016.de")
    assert configs["scratch"].train.init_from is None
    mixed = configs["mixed"].data
    assert mixed.train_files[0][0].endswith("multi30k/train.de.gz") and len(mixed.train_files) == 9
    assert list(mixed.train_weights) == [1.0] + [2.0] * 8
    assert "parent" in {v.name for v in condition_variants(["fine-tuned"], None, files, 5, Path("runs"))}


def test_a_smoke_study_fine_tunes_its_parent_and_scores_every_model_on_the_same_sets(tmp_path, data_dir,
                                                                                     monkeypatch, experiment) -> None:
    monkeypatch.setenv("VASWANI_CACHE", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)
    payload = experiment("fine-tuning", tmp_path / "out", "--smoke", "--runs-dir", str(tmp_path / "runs"),
                         "--data-dir", str(data_dir))
    models = payload["results"]["models"]
    assert [m["condition"] for m in models] == ["parent", "fine-tuned", "fine-tuned-decoder"]
    # each row says how its model was trained: the smoke settings stop every run, the parent too, at 6 updates
    assert [m["updates"] for m in models] == [6, 6, 6] and all(m["train_minutes"] > 0 for m in models)
    assert models[0]["d_model"] == models[1]["d_model"]
    config = yaml.safe_load((tmp_path / "runs" / "fine-tuned-decoder" / "config.yaml").read_text())
    assert config["train"]["freeze"] == "encoder" and "/runs/parent/checkpoints/" in config["train"]["init_from"]
    assert "newstest2017" in (tmp_path / "out" / "table.md").read_text()
    assert "**fine-tuned**" in (tmp_path / "out" / "README.md").read_text()


def test_a_fine_tuning_takes_its_parents_model_whatever_width_the_recipe_names(tiny_checkpoint: Path) -> None:
    """The clock fit may train README command 1's model wider than the recipe's 128: a fine-tuning of it keeps the
    parent's width and vocabulary, as `vaswani train --init-from` does, instead of refusing the recipe's d_model."""
    from vaswani.model.serialization import check_checkpoint

    parent = check_checkpoint(tiny_checkpoint)
    variant = RunVariant("fine-tuned", "fine-tuned", (f"train.init_from={tiny_checkpoint}", "model.dropout=0.2"))
    config = variant_config("multi30k-cpu", variant, STUDY_SETTINGS)
    assert parent.d_model != 128 and config.model.d_model == parent.d_model
    assert config.model.vocab_size == config.data.vocab_size == parent.vocab_size
    assert config.model.dropout == 0.2  # a setting that changes no weight still applies
    assert config.train.scale_up_models == () and config.train.init_from == str(tiny_checkpoint.resolve())
