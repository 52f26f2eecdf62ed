"""Fitting a run to its clock (training/budget.py), on a simulated clock: each simulated update advances the clock
by its tokens over the machine's rate, so the rule is checked for machines of any speed without running them."""

from __future__ import annotations

import math

import pytest

from vaswani.training.budget import (EARLY_STOPPING_LR_FRACTION, Candidate, candidates, early_stopping_counts,
                                     plan_for_budget, tokens_per_second)

# The multi30k-cpu ladder: the preset's d128 model and two wider ones, with their training cost relative to it.
LADDER = candidates(["model.d_model=192,model.d_ff=768", "model.d_model=256,model.d_ff=1024"])
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

    def measure(candidate: Candidate) -> float:
        measured.append(candidate.name)
        rate = rate_of_smallest / COST[candidate.name]

        def step() -> int:
            clock.now += tokens_per_update / rate
            return tokens_per_update

        return tokens_per_second(step, seconds=15.0, clock=clock)

    return measure, measured


def test_a_machine_too_slow_for_the_epochs_keeps_the_presets_model_and_measures_nothing_larger() -> None:
    clock = SimulatedClock()
    measure, measured = machine(3_800, clock)  # a 2-core AVX2 CPU: ~26 epochs of d128 in the hour
    plan = plan_for_budget(LADDER, measure, HOUR, EPOCH_TOKENS, epochs=40)
    assert plan.chosen is LADDER[0] and measured == [LADDER[0].name]
    assert plan.measurements[0].tokens_per_second == pytest.approx(3_800)
    assert plan.measurements[0].epochs_in_budget == pytest.approx(3_800 * HOUR / EPOCH_TOKENS)
    assert clock.now == pytest.approx(15.0 + 3000 / 3_800, abs=1.0)  # the measuring costs ~15 s of the hour


@pytest.mark.parametrize("rate, chosen", [(12_500, 1), (25_000, 2), (200_000, 2)])
def test_a_faster_machine_trains_the_largest_model_that_completes_the_epochs(rate: float, chosen: int) -> None:
    """A 2-core CPU with bf16 units (~3.3x AVX2) can afford d192 for 40 epochs; a faster one d256; nothing larger
    is listed, so a much faster machine trains d256 (its clock-driven cosine ends at the epochs)."""
    measure, measured = machine(rate, SimulatedClock())
    plan = plan_for_budget(LADDER, measure, HOUR, EPOCH_TOKENS, epochs=40)
    assert plan.chosen is LADDER[chosen]
    for measurement in plan.measurements:  # every measured model's epochs follow from its rate
        assert measurement.epochs_in_budget == pytest.approx(rate / COST[measurement.candidate.name] * HOUR
                                                             / EPOCH_TOKENS, rel=1e-3)
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
