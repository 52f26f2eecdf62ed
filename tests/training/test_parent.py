"""The pieces of fine-tuning without a training run: which parameters each `train.freeze` choice freezes under
each embedding tying, which model settings a fine-tuned run may change, and how a parent is found and
recorded."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest

from vaswani.config import ModelConfig
from vaswani.errors import ConfigError, VaswaniError
from vaswani.model import Transformer
from vaswani.training.parent import find_parent, fine_tune_config, freeze, initial_model
from vaswani.training.presets import load_preset


def tiny(**settings) -> Transformer:
    return Transformer(ModelConfig.preset("tiny", vocab_size=60, positions="learned", **settings))


def test_freezing_the_embeddings_takes_every_table_and_the_output_tied_to_them():
    model = tiny()  # all three tied: one token table, plus the two learned position tables
    frozen = freeze(model, "embeddings")
    assert frozen == ["encoder.embed.tokens.weight", "encoder.embed.positions.embedding.weight",
                      "decoder.embed.positions.embedding.weight"]
    assert not model.output.weight.requires_grad  # the same tensor as the token table
    assert all(p.requires_grad for name, p in model.named_parameters() if name not in frozen)


@pytest.mark.parametrize("tying, shared_table",
                         [("all-three", True), ("decoder-output", False), ("none", False)])
def test_freezing_the_encoder_leaves_what_the_decoder_shares(tying, shared_table):
    model = tiny(tie_embeddings=tying)
    frozen = set(freeze(model, "encoder"))
    encoder = {f"encoder.{name}" for name, _ in model.encoder.named_parameters()}
    assert ("encoder.embed.tokens.weight" in frozen) is not shared_table
    assert frozen == encoder - ({"encoder.embed.tokens.weight"} if shared_table else set())
    assert all(p.requires_grad for p in model.decoder.parameters())
    assert freeze(tiny(), "none") == []


def test_an_initial_model_from_a_parent_holds_its_weights(trained_checkpoint):
    parent = find_parent(trained_checkpoint)
    model = initial_model(parent.model, parent, "none", "cpu")
    again = initial_model(parent.model, parent, "none", "cpu")
    drawn = initial_model(parent.model, None, "none", "cpu")
    weights = dict(model.named_parameters())
    assert all(p.equal(weights[name]) for name, p in again.named_parameters())
    assert not all(p.equal(weights[name]) for name, p in drawn.named_parameters())


def test_a_fine_tuned_run_keeps_its_parents_model_and_may_change_only_dropout_and_the_kernel(
        trained_checkpoint):
    parent = find_parent(trained_checkpoint)
    preset = load_preset("multi30k-cpu")  # a 128-wide model that picks a wider one by the clock
    config = fine_tune_config(preset, parent, ["model.dropout=0.3", "model.attention=standard",
                                               "train.lr=0.0001"])
    assert config.model.d_model == parent.model.d_model == 64 and config.model.dropout == 0.3
    assert config.train.init_from == str(trained_checkpoint.resolve()) and config.train.scale_up_models == ()
    assert config.data.vocab_size == parent.model.vocab_size
    with pytest.raises(ConfigError, match=r"model.d_ff=512: a run initialised from .* keeps that model"):
        fine_tune_config(preset, parent, ["model.d_ff=512"])


def test_a_parent_is_recorded_by_its_weights_and_manifest(trained_checkpoint, tmp_path):
    parent = find_parent(trained_checkpoint)
    record = parent.record()
    assert record["weights_sha256"] == hashlib.sha256(
        (trained_checkpoint / "model.safetensors").read_bytes()).hexdigest()
    assert record["manifest_sha256"] is None  # this fixture was saved without one
    lacking = Path(shutil.copytree(trained_checkpoint, tmp_path / "no-tokenizer"))
    (lacking / "tokenizer.json").unlink()
    with pytest.raises(VaswaniError, match="no tokenizer.json; a run initialised from a checkpoint"):
        find_parent(lacking)
    edited = Path(shutil.copytree(trained_checkpoint, tmp_path / "edited"))
    settings = json.loads((edited / "model.json").read_text())
    (edited / "model.json").write_text(json.dumps({**settings, "activation": "gelu"}))
    with pytest.raises(VaswaniError, match="model.json does not match"):
        find_parent(edited)
