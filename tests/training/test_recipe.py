"""The pieces of the training recipe, each against its definition: schedule, weight decay groups, loss masking,
config overrides, atomic checkpoints."""

from __future__ import annotations

import dataclasses
import os
import pickle

import pytest
import torch
import torch.nn as nn

from vaswani.config import ModelConfig
from vaswani.errors import ConfigError
from vaswani.evaluation.checkpoint_info import CheckpointMeta
from vaswani.model import Transformer
from vaswani.training.checkpoint import TrainerState, point_link_at, save_checkpoint
from vaswani.training.config import RunConfig, TrainConfig
from vaswani.training.loss import translation_loss
from vaswani.training.optim import build_optimizer, parameter_groups
from vaswani.training.presets import apply_settings, load_preset, preset_names
from vaswani.training.schedule import build_scheduler, decay_lr, noam_lr


def test_noam_schedule_is_the_papers_formula() -> None:
    d, warmup = 512, 4000
    for step in [1, 10, 1000, 3999, 4000, 4001, 10_000, 100_000]:
        expected = d**-0.5 * min(step**-0.5, step * warmup**-1.5)
        assert noam_lr(step, d, warmup) == pytest.approx(expected, rel=1e-12)
    # linear warmup, peak at step = warmup, then inverse square root decay
    assert noam_lr(2000, d, warmup) == pytest.approx(noam_lr(4000, d, warmup) / 2)
    assert noam_lr(16_000, d, warmup) == pytest.approx(noam_lr(4000, d, warmup) / 2)
    peak = max(noam_lr(s, d, warmup) for s in range(1, 20_000))
    assert peak == pytest.approx(noam_lr(4000, d, warmup))


def test_no_warmup_removes_only_the_ramp() -> None:
    d, warmup = 128, 100
    for step in range(1, 400):
        without = noam_lr(step, d, warmup, 0.5, ramp=False)
        assert without == pytest.approx(noam_lr(max(step, warmup), d, warmup, 0.5))  # the peak, held
        assert without >= noam_lr(step, d, warmup, 0.5)
    assert noam_lr(1, d, warmup, 0.5, ramp=False) == pytest.approx(noam_lr(warmup, d, warmup, 0.5))
    assert decay_lr(1, 1e-3, 10, 100, "cosine", ramp=False) == pytest.approx(1e-3)
    assert decay_lr(50, 1e-3, 10, 100, "cosine", ramp=False) == pytest.approx(decay_lr(50, 1e-3, 10, 100, "cosine"))


def test_scheduler_drives_the_optimizer_lr_from_step_one() -> None:
    model = nn.Linear(4, 4)
    config = TrainConfig(warmup_steps=10, lr_factor=2.0)
    optimizer = torch.optim.AdamW(model.parameters())
    scheduler = build_scheduler(optimizer, config, d_model=64, total_steps=None)
    seen = []
    for _ in range(20):
        seen.append(optimizer.param_groups[0]["lr"])  # the lr the next update will use
        optimizer.step()
        scheduler.step()
    assert seen == pytest.approx([noam_lr(s, 64, 10, 2.0) for s in range(1, 21)])


@pytest.mark.parametrize("shape", ["linear", "cosine"])
def test_decay_schedules_warm_up_then_reach_the_floor(shape: str) -> None:
    lrs = [decay_lr(s, 1e-3, 10, 100, shape, min_ratio=0.1) for s in range(1, 101)]
    assert lrs[9] == pytest.approx(1e-3)
    assert lrs[-1] == pytest.approx(1e-4)
    assert all(a >= b for a, b in zip(lrs[9:], lrs[10:]))
    midpoint = decay_lr(55, 1e-3, 10, 100, shape, 0.0)
    assert midpoint == pytest.approx(5e-4, rel=1e-6)  # both shapes cross half the peak half-way


@pytest.mark.parametrize("shape", ["linear", "cosine"])
def test_a_decay_on_the_clock_ends_with_the_time_budget(shape: str) -> None:
    """train.decay_on_clock: on a machine where only 40 of 100 planned updates fit in train.max_minutes, the rate
    still reaches its floor when the budget runs out; where all of them fit, the steps lead as without it."""
    config = TrainConfig(schedule=shape, lr=1e-3, warmup_steps=10, max_minutes=10, decay_on_clock=True)
    clock = {"seconds": 0.0}
    optimizer = torch.optim.SGD(nn.Linear(2, 2).parameters())
    scheduler = build_scheduler(optimizer, config, d_model=64, total_steps=100,
                                elapsed_seconds=lambda: clock["seconds"])
    rates = []
    for step in range(1, 41):  # 15 s per update: update 40 ends at the 600 s budget
        rates.append(optimizer.param_groups[0]["lr"])
        clock["seconds"] = 15.0 * step
        optimizer.step()
        scheduler.step()
    assert rates[9] == pytest.approx(1e-3)  # the warmup is the steps' business
    assert rates[24] == pytest.approx(decay_lr(25, 1e-3, 10, 100, shape, clock=24 * 15 / 600))
    assert rates[24] < decay_lr(25, 1e-3, 10, 100, shape)  # behind on the steps: the clock leads
    assert optimizer.param_groups[0]["lr"] == pytest.approx(0.0, abs=1e-12)  # the budget is spent
    assert decay_lr(60, 1e-3, 10, 100, shape, clock=0.1) == decay_lr(60, 1e-3, 10, 100, shape)  # steps lead


def test_decay_on_the_clock_needs_a_decay_and_a_clock() -> None:
    with pytest.raises(ConfigError, match="train.decay_on_clock"):
        TrainConfig(schedule="noam", max_minutes=10, decay_on_clock=True)
    with pytest.raises(ConfigError, match="train.decay_on_clock"):
        TrainConfig(schedule="cosine", decay_on_clock=True)


def test_weight_decay_skips_biases_norms_and_embeddings() -> None:
    model = Transformer(ModelConfig.preset("tiny", positions="learned"))
    decay, no_decay = parameter_groups(model, 0.1)
    decayed = {id(p) for p in decay["params"]}
    names = {id(p): n for n, p in model.named_parameters()}
    for name, param in model.named_parameters():
        should_decay = name.endswith("proj.weight") or name.endswith(("up.weight", "down.weight"))
        assert (id(param) in decayed) == should_decay, name
    assert sum(p.numel() for p in decay["params"] + no_decay["params"]) == model.num_parameters()
    assert all("norm" not in names[id(p)] and "embed" not in names[id(p)] for p in decay["params"])


def test_adam_l2_variant_is_plain_adam() -> None:
    model = Transformer(ModelConfig.preset("tiny"))
    optimizer = build_optimizer(model, TrainConfig(optimizer="adam-l2"), torch.device("cpu"))
    assert type(optimizer) is torch.optim.Adam
    assert type(build_optimizer(model, TrainConfig(), torch.device("cpu"))) is torch.optim.AdamW


def test_loss_ignores_padding_and_is_per_token() -> None:
    model = Transformer(ModelConfig.preset("tiny", dropout=0.0, vocab_size=40)).eval()
    src = torch.tensor([[5, 6, 7, 2], [8, 9, 2, 0]])
    tgt_in = torch.tensor([[1, 10, 11, 12], [1, 13, 0, 0]])
    tgt_out = torch.tensor([[10, 11, 12, 2], [13, 2, 0, 0]])
    out = translation_loss(model, src, tgt_in, tgt_out, label_smoothing=0.0)
    assert out.n_tokens == 6
    logits = model(src, tgt_in)
    manual = sum(-torch.log_softmax(logits[b, t], -1)[tgt_out[b, t]] for b, t in
                 [(0, 0), (0, 1), (0, 2), (0, 3), (1, 0), (1, 1)])
    torch.testing.assert_close(out.loss_sum, manual, rtol=1e-5, atol=1e-5)
    # garbage in the padded target positions changes nothing
    tgt_in2 = tgt_in.clone()
    tgt_in2[1, 2:] = 0
    assert translation_loss(model, src, tgt_in2, tgt_out, 0.0).loss_sum.item() == pytest.approx(out.loss_sum.item())


def test_label_smoothing_matches_its_definition() -> None:
    model = Transformer(ModelConfig.preset("tiny", dropout=0.0, vocab_size=30)).eval()
    src, tgt_in, tgt_out = torch.tensor([[5, 2]]), torch.tensor([[1, 7]]), torch.tensor([[7, 2]])
    eps = 0.1
    log_probs = torch.log_softmax(model(src, tgt_in)[0], -1)
    expected = sum((1 - eps) * -log_probs[t, y] + eps * -log_probs[t].mean() for t, y in enumerate([7, 2]))
    out = translation_loss(model, src, tgt_in, tgt_out, label_smoothing=eps)
    torch.testing.assert_close(out.loss_sum, expected, rtol=1e-5, atol=1e-5)


def test_presets_load_and_overrides_are_typed() -> None:
    assert {"multi30k-cpu", "multi30k-gpu", "multi30k-student", "wmt17-base", "smoke"} <= set(preset_names())
    for name in preset_names():
        assert isinstance(load_preset(name), RunConfig)
    config = apply_settings(load_preset("smoke"), ["model.positions=rope", "train.max_steps=7", "train.lr=3e-4",
                                                   "train.clip_grad_norm=none", "data.vocab_size=500"])
    assert config.model.positions == "rope" and config.train.max_steps == 7
    assert config.train.lr == 3e-4 and config.train.clip_grad_norm is None and config.data.vocab_size == 500
    assert RunConfig.from_dict(config.to_dict()) == config  # the saved config.yaml round-trips


def test_a_settled_config_refuses_every_change_and_leaves_the_one_it_came_from_changeable() -> None:
    config = load_preset("smoke")
    settled = config.settled()
    assert settled == config and settled.to_yaml() == config.to_yaml()
    for section, name in ((settled, "model"), (settled.model, "d_model"), (settled.data, "max_len"),
                          (settled.train, "lr")):
        with pytest.raises(dataclasses.FrozenInstanceError, match="settled"):
            setattr(section, name, getattr(section, name))
    config.train.lr = 0.5  # the caller's own config is not the settled copy
    assert settled.train.lr == load_preset("smoke").train.lr
    changed = dataclasses.replace(settled.train, lr=0.25)  # a changed copy is a new, unsettled config
    changed.lr = 0.125
    assert changed.lr == 0.125 and pickle.loads(pickle.dumps(settled)) == settled


def test_a_run_config_holding_a_setting_that_configures_nothing_still_loads() -> None:
    saved = load_preset("smoke").to_dict()
    saved["train"]["num_workers"] = 4  # the config.yaml of a run that set it
    assert RunConfig.from_dict(saved) == load_preset("smoke")
    with pytest.raises(ConfigError, match="train.num_workers"):  # given now, it is refused as unknown
        apply_settings(load_preset("smoke"), ["train.num_workers=4"])


@pytest.mark.parametrize("setting,message", [
    ("train.learning_rate=1", "unknown setting train.learning_rate"),
    ("model.positions=absolute", "model.positions='absolute'"),
    ("optim.lr=1", "section.key=value"),
    ("train.schedule=exp", "train.schedule='exp'"),
])
def test_unknown_or_invalid_settings_are_named(setting: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(".", r"\.")):
        apply_settings(load_preset("smoke"), [setting])


def _state(step: int) -> TrainerState:
    return TrainerState(optimizer={"x": torch.ones(2)}, scheduler={}, scaler={}, progress={"step": step}, rng={},
                        config_yaml="")


def _meta(step: int) -> CheckpointMeta:
    return CheckpointMeta(step=step, epoch=0, reason="periodic", best_metric=None)


def test_checkpoints_are_complete_or_absent(tmp_path, monkeypatch) -> None:
    model = Transformer(ModelConfig.preset("tiny"))
    tokenizer = tmp_path / "tokenizer.json"
    tokenizer.write_text("{}")
    checkpoints = tmp_path / "checkpoints"
    first = save_checkpoint(checkpoints, "step_0000001", model, tokenizer, _state(1), _meta(1))
    point_link_at(checkpoints, "last", first)

    # a crash in the middle of writing the next checkpoint (here: while saving the trainer state)
    def crash(*args, **kwargs):
        raise OSError("disk vanished")

    monkeypatch.setattr(torch, "save", crash)
    with pytest.raises(OSError):
        save_checkpoint(checkpoints, "step_0000002", model, tokenizer, _state(2), _meta(2))
    assert not (checkpoints / "step_0000002").exists()
    assert os.readlink(checkpoints / "last") == "step_0000001"
    assert sorted(p.name for p in (checkpoints / "last").iterdir()) == [
        "meta.json", "model.json", "model.safetensors", "tokenizer.json", "trainer_state.pt", "vaswani.json"]


def test_trainer_state_is_loaded_without_executing_code(tmp_path) -> None:
    from vaswani.errors import VaswaniError
    from vaswani.io import write_manifest
    from vaswani.model.serialization import CHECKPOINT_KIND
    from vaswani.training.checkpoint import load_trainer_state

    class Evil:
        def __reduce__(self):
            return (os.system, ("echo pwned > " + str(tmp_path / "pwned"),))

    model = Transformer(ModelConfig.preset("tiny"))
    tokenizer = tmp_path / "tokenizer.json"
    tokenizer.write_text("{}")
    directory = save_checkpoint(tmp_path / "checkpoints", "step_0000001", model, tokenizer, _state(1), _meta(1))
    torch.save({"payload": Evil()}, directory / "trainer_state.pt")
    with pytest.raises(VaswaniError, match=r"trainer_state.pt: [\d,]+ bytes, but .*vaswani.json says vaswani wrote"):
        load_trainer_state(directory)  # not the file the checkpoint was written with
    write_manifest(directory, CHECKPOINT_KIND)  # as a tool that rewrote the manifest too: unpickling refuses it
    with pytest.raises(VaswaniError, match="refused") as refused:
        load_trainer_state(directory)
    assert not (tmp_path / "pwned").exists()
    # torch's own message advises retrying with weights_only=False, i.e. running the payload: never passed on
    assert "weights_only" not in str(refused.value)


def test_the_student_preset_is_the_hours_recipe_with_a_shallow_decoder() -> None:
    student, teacher = load_preset("multi30k-student"), load_preset("multi30k-cpu")
    assert (student.model.n_encoder_layers, student.model.n_decoder_layers) == (3, 1)
    assert student.model.d_model == teacher.model.d_model and not student.train.scale_up_models
    assert student.train.max_minutes == teacher.train.max_minutes and student.train.lr == teacher.train.lr
