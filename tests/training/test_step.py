"""The deferred training step: the same update as the synchronous one when every update is finite, a non-finite
one skipped by the optimizer's own kernel and reported when read, and no host read of a device value in between."""

from __future__ import annotations

import copy

import pytest
import torch

from vaswani.config import ModelConfig
from vaswani.model import Transformer
from vaswani.training.config import TrainConfig
from vaswani.training.loss import TranslationLoss
from vaswani.training.optim import build_optimizer
from vaswani.training.schedule import build_scheduler
from vaswani.training.step import read_results, train_step

CPU = torch.device("cpu")
VOCAB = 60


class Batch:
    def __init__(self, src: torch.Tensor, tgt: torch.Tensor):
        self.src, self.tgt_in, self.tgt_out = src, tgt[:, :-1], tgt[:, 1:]

    @property
    def tokens(self) -> int:
        return int((self.tgt_out != 0).sum())


def batches(n: int, seed: int = 1) -> list[Batch]:
    generator = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(n):
        src = torch.randint(3, VOCAB, (6, 9), generator=generator)
        tgt = torch.randint(3, VOCAB, (6, 10), generator=generator)
        src[1, 5:] = 0
        tgt[2, 6:] = 0
        out.append(Batch(src, tgt))
    return out


def training(all_positions: bool = False, dropout: float = 0.1):
    """A tiny model in its loss, with the trainer's fused AdamW and a warmup schedule."""
    torch.manual_seed(0)
    model = TranslationLoss(Transformer(ModelConfig.preset("tiny", vocab_size=VOCAB, dropout=dropout)), 0.1,
                            all_positions=all_positions)
    config = TrainConfig(warmup_steps=3)
    optimizer = build_optimizer(model, config, CPU)
    return model, optimizer, build_scheduler(optimizer, config, 64, total_steps=10)


def test_the_deferred_step_is_the_synchronous_step_when_every_update_is_finite() -> None:
    runs = []
    for defer_reads in (False, True):
        model, optimizer, scheduler = training()
        results = [train_step(model, optimizer, [batch], batch.tokens, clip_grad_norm=1.0, scheduler=scheduler,
                              defer_reads=defer_reads) for batch in batches(5)]
        runs.append((model.state_dict(), optimizer.state_dict()["state"], results))
    (weights, moments, synchronous), (deferred_weights, deferred_moments, deferred) = runs
    for name, tensor in weights.items():
        assert torch.equal(deferred_weights[name], tensor), name
    for index, state in moments.items():
        assert all(torch.equal(deferred_moments[index][key], value) for key, value in state.items())
    read = read_results(deferred)
    assert [r.loss for r in read] == [r.loss for r in synchronous]
    assert [r.grad_norm for r in read] == [r.grad_norm for r in synchronous]
    assert [(r.finite, r.tokens, r.correct) for r in read] == [(r.finite, r.tokens, r.correct) for r in synchronous]


@pytest.mark.parametrize("defer_reads", [False, True], ids=["read-at-once", "deferred"])
def test_a_nan_update_changes_no_weight_advances_the_schedule_and_is_reported(monkeypatch, defer_reads: bool) -> None:
    """One meaning for a skipped update whichever way it is decided: no weight, moment or optimizer step count
    changes, the schedule advances as for any update, and the result says it was skipped."""
    model, optimizer, scheduler = training()
    first, nan_batch, last = batches(3)
    train_step(model, optimizer, [first], first.tokens, clip_grad_norm=1.0, scheduler=scheduler,
               defer_reads=defer_reads)
    before = copy.deepcopy((model.state_dict(), optimizer.state_dict()["state"]))
    original = TranslationLoss.forward
    monkeypatch.setattr(TranslationLoss, "forward",
                        lambda self, *batch: tuple(v * float("nan") for v in original(self, *batch)))
    skipped = train_step(model, optimizer, [nan_batch], nan_batch.tokens, clip_grad_norm=1.0, scheduler=scheduler,
                         defer_reads=defer_reads)
    weights, moments = before
    assert all(torch.equal(model.state_dict()[name], tensor) for name, tensor in weights.items())
    for index, state in optimizer.state_dict()["state"].items():  # moments and step counts too
        assert all(torch.equal(value, moments[index][key]) for key, value in state.items())
    assert scheduler.last_epoch == 2
    monkeypatch.setattr(TranslationLoss, "forward", original)
    taken = train_step(model, optimizer, [last], last.tokens, clip_grad_norm=1.0, scheduler=scheduler,
                       defer_reads=defer_reads)
    results = read_results([skipped, taken]) if defer_reads else [skipped, taken]
    assert [r.finite for r in results] == [False, True]
    assert not torch.equal(model.state_dict()["model.output.weight"], weights["model.output.weight"])


@pytest.mark.parametrize("all_positions", [False, True], ids=["gathered-loss", "all-positions-loss"])
def test_the_deferred_step_never_reads_a_device_value_on_the_host(all_positions: bool,
                                                                   host_reads) -> None:
    """Counted on the CPU: every read the step makes is one the GPU path would wait on. Only the loss over all
    positions is free of them (gathering the real positions is a boolean-mask index); the synchronous step reads
    its sums and the gradient norm."""
    model, optimizer, scheduler = training(all_positions=all_positions)
    batch = batches(1)[0]
    tokens = batch.tokens  # the trainer counts them on the host, from the sentence lengths
    with host_reads() as deferred_reads:
        result = train_step(model, optimizer, [batch], tokens, clip_grad_norm=1.0, scheduler=scheduler,
                            defer_reads=True)
    with host_reads() as synchronous_reads:
        train_step(model, optimizer, [batch], tokens, clip_grad_norm=1.0, scheduler=scheduler)
    if all_positions:
        assert deferred_reads.reads == []
    else:
        assert deferred_reads.reads and set(deferred_reads.reads) <= {"__getitem__", "nonzero"}
    assert {"tolist", "__float__"} <= set(synchronous_reads.reads)
    assert read_results([result])[0].finite


def test_a_deferred_step_needs_the_fused_optimizer() -> None:
    model, _, _ = training()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=True)
    batch = batches(1)[0]
    with pytest.raises(ValueError, match="fused optimizer"):
        train_step(model, optimizer, [batch], batch.tokens, defer_reads=True)
