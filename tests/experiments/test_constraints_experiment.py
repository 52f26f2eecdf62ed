"""The constraints experiment samples phrases as Post & Vilar do: 1-3 words of the reference, none the output
already has, no two overlapping, the same ones for the same seed."""

from __future__ import annotations

import random

from vaswani.experiments.constraints import ConstrainedRun, Setting, render_table, sample_phrases


def test_phrases_come_from_the_reference_and_are_missing_from_the_output() -> None:
    reference = "A brown dog runs through the tall green grass."
    output = "A dog runs in the grass."
    phrases = sample_phrases(reference, output, random.Random(0))
    assert len(phrases) == 3
    assert phrases == sample_phrases(reference, output, random.Random(0))
    for phrase in phrases:
        assert phrase in reference and not phrase.endswith(".") and 1 <= len(phrase.split()) <= 3
        assert phrase not in ("A", "dog", "runs", "the", "grass", "A dog", "dog runs")
    words = [word for phrase in phrases for word in phrase.split()]
    assert len(words) == len(set(words))  # no two phrases share a word of the reference


def test_a_reference_the_output_covers_gives_no_phrase() -> None:
    assert sample_phrases("A dog.", "A dog runs.", random.Random(0)) == []


def test_the_table_states_the_model_and_the_cost() -> None:
    rows = [ConstrainedRun(c, 10, 10 * c, 30.0 + c, 1.0, 2.5 * (1 + c), 4.0 / (1 + c), 5.0 * (1 + c), 1.0 + c)
            for c in range(4)]
    setting = Setting("m", "a 128-wide model", "multi30k test2016", 10, 5, 0, {}, "cpu", "fp32")
    table = render_table(rows, setting, "Measured on a CPU.")
    assert "a 128-wide model" in table and "| 3 | 10 | 33.00 | 100.0% | 1.0 | 2000 | 4.00x |" in table
