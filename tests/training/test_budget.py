"""Fitting a run to its clock (training/budget.py), on a simulated clock: each simulated update advances the clock
by its tokens over the machine's rate, so the rule is checked for machines of any speed without running them."""

from __future__ import annotations

import math

import pytest
import torch
import yaml

from vaswani.training.budget import Candidate, candidates, plan_for_budget, tokens_per_second
from vaswani.training.schedule import EARLY_STOPPING_LR_FRACTION, early_stopping_counts

# The multi30k-cpu ladder: the preset's d128 model and two wider ones, with their training cost relative to it.
LADDER = candidates(["model.d_model=192 model.d_ff=768", "model.d_model=256 model.d_ff=1024"])
COST = {candidate.name: cost for candidate, cost in zip(LADDER, (1.0, 1.7, 2.8))}
EPOCH_TOKENS = 375_000  # target tokens of a Multi30k epoch, about
HOUR = 55 * 60


class SimulatedClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def machine(rate_of_smallest: float, clock: SimulatedClock, tokens_per_update: int = 3000):
    """measure(candidate): the candidate's tokens/s as timed on the simulated clock of a machine this fast."""
    measured: list[str] = []

    def measure(candidate: Candidate) -> tuple[float, int]:
        measured.append(candidate.name)
        rate = rate_of_smallest / COST[candidate.name]

        def step() -> int:
            clock.now += tokens_per_update / rate
            return tokens_per_update

        return tokens_per_second(step, seconds=15.0, clock=clock), EPOCH_TOKENS

    return measure, measured


def test_a_machine_too_slow_for_the_epochs_keeps_the_presets_model_and_measures_nothing_larger() -> None:
    clock = SimulatedClock()
    measure, measured = machine(3_800, clock)  # a 2-core AVX2 CPU: ~26 epochs of d128 in the hour
    plan = plan_for_budget(LADDER, measure, lambda: HOUR - clock.now, epochs=40)
    assert plan.model == LADDER[0].name and plan.settings == [] and measured == [LADDER[0].name]
    assert plan.measurements[0].tokens_per_second == pytest.approx(3_800)
    assert clock.now == pytest.approx(15.0 + 3000 / 3_800, abs=1.0)  # the measuring costs ~15 s of the hour
    assert plan.minutes_left == pytest.approx((HOUR - clock.now) / 60)
    assert plan.measurements[0].epochs_in_budget == pytest.approx(3_800 * (HOUR - clock.now) / EPOCH_TOKENS)
    assert "none completes 40 epochs: the clock ends the run" in plan.describe()


@pytest.mark.parametrize("epochs, chosen", [(40, 0), (20, 1), (10, 2)])
def test_fewer_epochs_asked_of_a_wider_model_choose_a_wider_one_on_the_same_machine(epochs: int, chosen: int) -> None:
    """A 2-core AVX-512 CPU without bf16 units: d128 completes ~48 epochs in the hour, d192 ~28, d256 ~17."""
    clock = SimulatedClock()
    measure, _ = machine(5_500, clock)
    plan = plan_for_budget(LADDER, measure, lambda: HOUR - clock.now, epochs=epochs)
    assert plan.model == LADDER[chosen].name and plan.epochs == epochs


@pytest.mark.parametrize("rate, chosen", [(12_500, 1), (25_000, 2), (200_000, 2)])
def test_a_faster_machine_trains_the_largest_model_that_completes_the_epochs(rate: float, chosen: int) -> None:
    """A 2-core CPU with bf16 units (~3.3x AVX2) can afford d192 for 40 epochs; a faster one d256; nothing larger
    is listed, so a much faster machine trains d256 (its clock-driven cosine ends at the epochs)."""
    clock = SimulatedClock()
    measure, measured = machine(rate, clock)
    plan = plan_for_budget(LADDER, measure, lambda: HOUR - clock.now, epochs=40)
    assert plan.model == LADDER[chosen].name and tuple(plan.settings) == LADDER[chosen].settings
    for measurement in plan.measurements:  # every measured model's epochs follow from its rate and the time left
        assert measurement.epochs_in_budget == pytest.approx(rate / COST[measurement.model] * HOUR / EPOCH_TOKENS,
                                                             rel=0.02)
    assert clock.now < 16 * len(measured)  # each measurement takes its 15 s and one untimed update
    fits = [m.epochs_in_budget >= 40 for m in plan.measurements]
    assert fits[: chosen + 1] == [True] * (chosen + 1) and all(not f for f in fits[chosen + 1:])
    assert len(measured) == min(chosen + 2, len(LADDER))  # stops at the first model that does not fit
    assert "the largest that completes 40 epochs" in plan.describe() and LADDER[chosen].name in plan.describe()


def test_candidates_are_the_presets_model_then_each_entry_as_settings() -> None:
    assert [c.settings for c in LADDER] == [(), ("model.d_model=192", "model.d_ff=768"),
                                            ("model.d_model=256", "model.d_ff=1024")]


def test_the_rate_is_timed_after_the_warmup_update_for_at_least_the_seconds_asked() -> None:
    clock = SimulatedClock()
    durations = iter([5.0, 1.0, 1.0, 1.0, 1.0])  # the first update allocates: it is not timed

    def step() -> int:
        clock.now += next(durations)
        return 100

    assert tokens_per_second(step, seconds=2.5, clock=clock) == pytest.approx(300 / 3.0)
    assert clock.now == 8.0


def test_early_stopping_waits_for_a_clock_driven_rate_to_fall() -> None:
    peak = 1.5e-3
    cosine = [peak * 0.5 * (1 + math.cos(math.pi * p / 100)) for p in range(101)]
    counting = [early_stopping_counts(True, lr, peak) for lr in cosine]
    first = counting.index(True)
    assert all(counting[first:]) and not any(counting[:first])
    assert cosine[first] <= EARLY_STOPPING_LR_FRACTION * peak < cosine[first - 1]
    assert 75 <= first <= 85  # the cosine's last fifth
    assert all(early_stopping_counts(False, lr, peak) for lr in cosine)  # a schedule on steps: patience as set


# ---- the rule in a real run: tiny models on Multi30k's validation pairs (one epoch is a dozen updates) -------------

TINY_RUN = ["data.train_split=val", "data.vocab_size=400", "train.max_steps=null", "train.max_tokens=800",
            "train.bleu_subset=0", "train.precision=fp32", "train.progress=false", "train.device=cpu",
            "train.scale_up_probe_seconds=0.2", "train.scale_up_models=model.d_ff=160,model.d_ff=192 train.lr=0.001"]


@pytest.fixture
def in_workdir(tmp_path, data_dir, monkeypatch):
    monkeypatch.setenv("VASWANI_DATA", str(data_dir))
    monkeypatch.setenv("VASWANI_CACHE", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_a_machine_fast_enough_trains_the_largest_listed_model_and_the_summary_says_why(in_workdir, capsys) -> None:
    from vaswani.training.config import RunConfig
    from vaswani.training.presets import apply_settings, load_preset
    from vaswani.training.run import train
    from vaswani.training.summary import RunSummary

    config = apply_settings(load_preset("smoke"), [*TINY_RUN, "train.max_epochs=1", "train.max_minutes=10"])
    summary = train(config, in_workdir / "run")
    plan = RunSummary.read(in_workdir / "run").scale_up
    assert plan is not None and plan == summary.scale_up
    assert plan.model == "model.d_ff=192 train.lr=0.001" and plan.settings == ["model.d_ff=192", "train.lr=0.001"]
    assert [m.model for m in plan.measurements] == ["the preset's model", "model.d_ff=160",
                                                   "model.d_ff=192 train.lr=0.001"]
    assert all(m.epochs_in_budget >= 1 and m.tokens_per_second > 0 for m in plan.measurements)
    saved = RunConfig.from_dict(yaml.safe_load((in_workdir / "run" / "config.yaml").read_text()))
    assert (saved.model.d_ff, saved.train.lr) == (192, 0.001)  # the run trained what the plan chose
    assert 9 < saved.train.max_minutes < 10 and saved.train.max_minutes == round(plan.minutes_left, 2)
    assert summary.epoch == 1 and "training model.d_ff=192 train.lr=0.001" in capsys.readouterr().out


def test_a_wider_model_that_completes_the_fewest_epochs_asked_is_chosen_and_its_run_ends_on_the_clock(
        in_workdir) -> None:
    from vaswani.training.presets import apply_settings, load_preset
    from vaswani.training.run import train

    # no model completes 100,000 epochs in the budget; every one completes 1
    config = apply_settings(load_preset("smoke"), [*TINY_RUN, "train.max_epochs=100000", "train.max_minutes=10",
                                                   "train.scale_up_min_epochs=1", "train.max_steps=2"])
    summary = train(config, in_workdir / "run")
    assert summary.scale_up.model == "model.d_ff=192 train.lr=0.001" and summary.scale_up.epochs == 1
    assert "the largest that completes 1 epochs" in summary.scale_up.describe()
    assert summary.step == 2


@pytest.mark.parametrize("settings, epochs", [([], 40), (["train.scale_up_min_epochs=20"], 20),
                                              (["train.scale_up_min_epochs=60"], 40),
                                              (["train.scale_up_min_epochs=20", "train.max_epochs=12"], 12)])
def test_a_wider_model_must_complete_the_fewest_epochs_asked_and_never_more_than_the_schedule(
        settings: list[str], epochs: int) -> None:
    from vaswani.training.budget import epochs_to_complete
    from vaswani.training.presets import apply_settings, load_preset

    preset = apply_settings(load_preset("multi30k-cpu"), ["train.scale_up_min_epochs=null", *settings])
    assert epochs_to_complete(preset.train) == epochs


def test_a_machine_too_slow_keeps_the_presets_model_and_a_resume_keeps_it_without_measuring(in_workdir) -> None:
    from vaswani.training.presets import apply_settings, load_preset
    from vaswani.training.resume import resumed_config
    from vaswani.training.run import train

    config = apply_settings(load_preset("smoke"), [*TINY_RUN, "train.max_epochs=100000", "train.max_minutes=0.1"])
    summary = train(config, in_workdir / "run")
    assert summary.scale_up.model == "the preset's model" and len(summary.scale_up.measurements) == 1
    assert summary.stop_reason.value == "max_minutes"
    resumed = train(resumed_config(in_workdir / "run", ["train.max_minutes=0.15"]), in_workdir / "run", resume=True)
    assert resumed.scale_up is None and resumed.step >= summary.step


def test_the_trainer_gets_the_config_the_clock_fit_chose_settled(in_workdir, monkeypatch) -> None:
    import dataclasses

    from vaswani.training import run
    from vaswani.training.presets import apply_settings, load_preset

    class Handed(Exception):
        pass

    def trainer(config, run_dir, resume=False, world=None, callbacks=(), data=None):
        with pytest.raises(dataclasses.FrozenInstanceError):
            config.train.max_minutes = 1.0
        assert (config.model.vocab_size, config.model.pad_id) == (data.tokenizer.vocab_size, data.tokenizer.pad_id)
        raise Handed(config)

    monkeypatch.setattr(run, "fit_to_budget", lambda config, run_dir: (apply_settings(config, ["model.d_ff=192"]),
                                                                     None))
    monkeypatch.setattr(run, "Trainer", trainer)
    config = apply_settings(load_preset("smoke"), [*TINY_RUN, "train.max_epochs=1", "train.max_minutes=10"])
    with pytest.raises(Handed) as handed:
        run.train(config, in_workdir / "run")
    assert handed.value.args[0].model.d_ff == 192 and config.model.d_ff != 192  # the caller's config as given


def test_a_trainer_times_updates_it_neither_counts_reports_nor_saves(in_workdir) -> None:
    from vaswani.training.callbacks import Callback
    from vaswani.training.data import settle
    from vaswani.training.presets import apply_settings, load_preset
    from vaswani.training.trainer import Trainer

    class Hooks(Callback):
        def __init__(self) -> None:
            self.called: list[str] = []

        def __getattribute__(self, name: str):
            if name.startswith("on_"):
                object.__getattribute__(self, "called").append(name)
            return object.__getattribute__(self, name)

    run_dir, hooks = in_workdir / "timed", Hooks()
    config, data = settle(apply_settings(load_preset("smoke"), [*TINY_RUN, "train.max_epochs=1"]), run_dir)
    trainer = Trainer(config, run_dir, data=data, callbacks=[hooks])
    before = {name: tensor.clone() for name, tensor in trainer.model.state_dict().items()}
    updates = trainer.unrecorded_updates()
    tokens = [next(updates) for _ in range(len(trainer.epoch_updates(0)) + 1)]  # once round, and again
    first = trainer.epoch_updates(0)[0]
    assert tokens[0] == tokens[-1] == sum(data.target_tokens(batch) for batch in first)
    assert trainer.progress.step == 0 and hooks.called == [] and not run_dir.exists()
    assert any(not torch.equal(before[name], tensor) for name, tensor in trainer.model.state_dict().items())


def test_the_rule_applies_only_with_a_budget_and_a_wrong_entry_is_named_in_one_line() -> None:
    from vaswani.errors import ConfigError
    from vaswani.training.presets import apply_settings, load_preset
    from vaswani.training.run import fits_to_budget

    preset = load_preset("multi30k-cpu")
    assert fits_to_budget(preset)
    assert not fits_to_budget(apply_settings(preset, ["train.max_epochs=null", "train.max_steps=100"]))
    assert not fits_to_budget(apply_settings(preset, ["train.scale_up_models="]))
    with pytest.raises(ConfigError) as error:
        apply_settings(preset, ["train.scale_up_models=model.d_model:256"])
    assert "train.scale_up_models entry 'model.d_model:256'" in str(error.value) and "\n" not in str(error.value)


def test_a_run_that_ends_before_its_clock_says_how_much_it_left_and_why() -> None:
    from vaswani.training.presets import apply_settings, load_preset
    from vaswani.training.run import unused_budget
    from vaswani.training.summary import RunSummary, Stop

    config = load_preset("multi30k-cpu")  # 55 minutes, 40 epochs, models to scale up to

    def summary(stop: Stop, minutes: float) -> RunSummary:
        return RunSummary(stop, step=100, epoch=40, best_metric=1.7, skipped_updates=0, minutes=minutes,
                          world_size=1)

    minutes, why = unused_budget(config, summary(Stop.MAX_EPOCHS, 41.5))
    assert minutes == 13.5 and "40 epochs" in why and "no larger model" in why
    minutes, why = unused_budget(config, summary(Stop.EARLY_STOP, 30.0))
    assert minutes == 25.0 and "early stopping" in why
    assert unused_budget(config, summary(Stop.MAX_MINUTES, 55.0)) == (None, None)  # the clock ended it
    assert unused_budget(config, summary(Stop.MAX_EPOCHS, 54.5)) == (None, None)  # under a minute is not worth a line
    no_clock = apply_settings(config, ["train.max_minutes=null", "train.decay_on_clock=false"])
    assert unused_budget(no_clock, summary(Stop.MAX_EPOCHS, 10.0)) == (None, None)
    alone = apply_settings(config, ["train.scale_up_models="])
    assert "no larger model" not in unused_budget(alone, summary(Stop.MAX_EPOCHS, 41.5))[1]
