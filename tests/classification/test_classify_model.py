"""TransformerClassifier: built from the project's Encoder, padding never changes a prediction."""

from __future__ import annotations

import dataclasses

import pytest
import torch
import torch.nn as nn

from vaswani.classification.model import TransformerClassifier
from vaswani.classification.settings import TrainSettings
from vaswani.classification.train import length_bucketed_batches, linear_schedule
from vaswani.config import ModelConfig
from vaswani.model.transformer import Encoder
from vaswani.training.optim import parameter_groups

CONFIG = dataclasses.replace(ModelConfig.preset("tiny"), vocab_size=50, max_len=32)


def _ids(lengths: list[int], width: int) -> torch.Tensor:
    ids = torch.zeros(len(lengths), width, dtype=torch.long)
    for row, n in enumerate(lengths):
        ids[row, 0], ids[row, 1 : n - 1], ids[row, n - 1] = 1, torch.randint(4, 50, (n - 2,)), 2
    return ids


@pytest.mark.parametrize("pooling", ["cls", "mean"])
def test_shapes_and_the_projects_own_encoder(pooling: str) -> None:
    model = TransformerClassifier(CONFIG, n_classes=3, pooling=pooling)
    assert isinstance(model.encoder, Encoder)
    assert not any(isinstance(m, nn.TransformerEncoder) for m in model.modules())
    assert model(_ids([5, 9], 9)).shape == (2, 3)


@pytest.mark.parametrize("pooling", ["cls", "mean"])
@pytest.mark.parametrize("norm", ["post", "pre"])
def test_padding_and_batch_neighbours_change_nothing(pooling: str, norm: str) -> None:
    config = dataclasses.replace(CONFIG, norm=norm)
    model = TransformerClassifier(config, n_classes=2, pooling=pooling).eval()
    ids = _ids([4, 11, 7], 11)
    batched = model(ids)
    alone = torch.cat([model(ids[i : i + 1, : int((ids[i] != 0).sum())]) for i in range(3)])
    more_padding = model(torch.cat([ids, torch.zeros(3, 6, dtype=torch.long)], dim=1))
    torch.testing.assert_close(batched, alone, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(batched, more_padding, rtol=1e-5, atol=1e-5)


def test_mean_pooling_averages_real_tokens_only() -> None:
    model = TransformerClassifier(CONFIG, n_classes=2, pooling="mean")
    states = torch.arange(12, dtype=torch.float32).view(1, 4, 3)
    ids = torch.tensor([[1, 7, 2, 0]])
    torch.testing.assert_close(model.pool(states, ids), states[0, :3].mean(0, keepdim=True))


def test_bad_arguments() -> None:
    with pytest.raises(ValueError, match="pooling"):
        TransformerClassifier(CONFIG, 2, pooling="max")
    with pytest.raises(ValueError, match="at least 2 classes"):
        TransformerClassifier(CONFIG, 1)


def test_weight_decay_only_on_linear_weights() -> None:
    model = TransformerClassifier(CONFIG, n_classes=2)
    decay, no_decay = parameter_groups(model, 0.1)
    names = {id(p): n for n, p in model.named_parameters()}
    decayed = {names[id(p)] for p in decay["params"]}
    assert decayed and all(n.endswith("weight") and "norm" not in n and "tokens" not in n for n in decayed)
    assert "head.weight" in decayed and "encoder.embed.tokens.weight" not in decayed
    assert len(decay["params"]) + len(no_decay["params"]) == len(list(model.parameters()))


def test_linear_schedule_warms_up_to_the_peak_then_decays_to_zero() -> None:
    optimizer = torch.optim.AdamW([torch.nn.Parameter(torch.zeros(1))], lr=0.5)
    schedule = linear_schedule(optimizer, TrainSettings(lr=0.5, warmup=4), total_steps=12)
    rates = []
    for _ in range(12):
        rates.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        schedule.step()
    assert [round(r, 4) for r in rates[:5]] == [0.125, 0.25, 0.375, 0.5, 0.4375] and rates[-1] == 0.0


def test_length_bucketed_batches_cover_every_text_once_within_the_size() -> None:
    lengths = [int(n) for n in torch.randint(1, 40, (500,), generator=torch.Generator().manual_seed(0))]
    batches = length_bucketed_batches(lengths, batch_size=32, seed=0, epoch=0)
    assert sorted(i for b in batches for i in b) == list(range(500)) and max(map(len, batches)) == 32
    assert batches != length_bucketed_batches(lengths, batch_size=32, seed=0, epoch=1)  # reshuffled per epoch
    assert batches == length_bucketed_batches(lengths, batch_size=32, seed=0, epoch=0)  # deterministic
