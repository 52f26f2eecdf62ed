"""Checkpoint averaging: the element-wise mean, tied weights stay tied, only like with like."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file

from vaswani.cli import main
from vaswani.config import ModelConfig
from vaswani.errors import VaswaniError
from vaswani.evaluation.average import average_checkpoints, last_checkpoints
from vaswani.model import Transformer
from vaswani.model.serialization import load_model, save_model


def _save(directory, seed: int, **overrides) -> Transformer:
    torch.manual_seed(seed)
    model = Transformer(ModelConfig.preset("tiny", dropout=0.0, vocab_size=60, **overrides))
    save_model(model, directory)
    (directory / "tokenizer.json").write_text('{"stand-in": true}')
    return model


@pytest.mark.parametrize("tying", ["all-three", "none"])
def test_average_of_two_models_is_the_elementwise_mean(tmp_path, tying: str) -> None:
    a, b = _save(tmp_path / "a", 1, tie_embeddings=tying), _save(tmp_path / "b", 2, tie_embeddings=tying)
    average_checkpoints([tmp_path / "a", tmp_path / "b"], tmp_path / "avg")
    averaged = load_model(tmp_path / "avg")
    expected = {name: (p + dict(b.named_parameters())[name]) / 2 for name, p in a.named_parameters()}
    for name, p in averaged.named_parameters():
        torch.testing.assert_close(p, expected[name], rtol=0, atol=1e-7)
    assert (tmp_path / "avg" / "tokenizer.json").read_text() == '{"stand-in": true}'
    tied = averaged.output.weight is averaged.decoder.embed.tokens.weight
    assert tied == (tying != "none")


def test_tied_weights_stay_one_tensor_in_the_averaged_file(tmp_path) -> None:
    for seed in range(3):
        _save(tmp_path / f"c{seed}", seed)
    average_checkpoints([tmp_path / f"c{seed}" for seed in range(3)], tmp_path / "avg")
    stored = load_file(tmp_path / "avg" / "model.safetensors")
    original = load_file(tmp_path / "c0" / "model.safetensors")
    assert stored.keys() == original.keys()  # the shared matrix is stored once, as in every input
    averaged = load_model(tmp_path / "avg")
    assert averaged.output.weight is averaged.decoder.embed.tokens.weight is averaged.encoder.embed.tokens.weight


def test_average_command_takes_the_last_n_steps_of_a_run(tmp_path, capsys) -> None:
    steps = [100, 1000, 200, 300]  # numeric order, not string order: 100 < 200 < 300 < 1000
    models = {step: _save(tmp_path / "run" / "checkpoints" / f"step_{step:06d}", step) for step in steps}
    assert [p.name for p in last_checkpoints(tmp_path / "run", 2)] == ["step_000300", "step_001000"]
    assert main(["average", "--run", str(tmp_path / "run"), "--last", "2", "--out", str(tmp_path / "avg")]) == 0
    assert "step_001000" in capsys.readouterr().out
    averaged = load_model(tmp_path / "avg")
    expected = (models[300].output.weight + models[1000].output.weight) / 2
    torch.testing.assert_close(averaged.output.weight, expected, rtol=0, atol=1e-7)
    assert len(json.loads((tmp_path / "avg" / "average.json").read_text())["averaged"]) == 2


def test_mismatched_checkpoints_are_refused(tmp_path, capsys) -> None:
    _save(tmp_path / "a", 1)
    _save(tmp_path / "b", 2, d_ff=64)
    with pytest.raises(VaswaniError, match="architecture differs"):
        average_checkpoints([tmp_path / "a", tmp_path / "b"], tmp_path / "avg")
    code = main(["average", "--checkpoints", str(tmp_path / "a"), str(tmp_path / "b"), "--out", str(tmp_path / "x")])
    assert code == 2 and "model.json" in capsys.readouterr().err
    assert main(["average", "--run", str(tmp_path), "--last", "3", "--out", str(tmp_path / "y")]) == 2
    with pytest.raises(VaswaniError, match="overwrite"):
        average_checkpoints([tmp_path / "a"], tmp_path / "a")
