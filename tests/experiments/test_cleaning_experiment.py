"""`vaswani experiment cleaning`: known noise put into a corpus, what `vaswani clean`'s rules drop of each kind, and
the noisy, cleaned and clean-only corpora trained on."""

from __future__ import annotations

import json
from collections import Counter

from vaswani.cli import main
from vaswani.experiments.cleaning import CLEAN, DUPLICATE, MISALIGNED, NOISE_KINDS, SWAPPED, add_noise, detection

SOURCE = [f"ein satz nummer {i}" for i in range(300)]
TARGET = [f"sentence number {i}" for i in range(300)]


def test_the_noise_replaces_its_share_of_pairs_in_equal_parts_of_each_kind() -> None:
    noisy = add_noise(SOURCE, TARGET, 0.3, seed=5)
    counts = Counter(noisy.labels)
    assert len(noisy.source) == len(noisy.target) == len(noisy.labels) == 300
    assert counts[CLEAN] == 210 and [counts[kind] for kind in NOISE_KINDS] == [30, 30, 30]
    pairs = list(zip(SOURCE, TARGET))
    for index, label in enumerate(noisy.labels):
        pair = (noisy.source[index], noisy.target[index])
        if label == CLEAN:
            assert pair == pairs[index]
        elif label == DUPLICATE:  # a copy of an earlier pair that stayed clean
            copied = pairs.index(pair)
            assert copied < index and noisy.labels[copied] == CLEAN
        elif label == SWAPPED:
            assert pair == (TARGET[index], SOURCE[index])
        else:
            assert label == MISALIGNED and pair[0] == SOURCE[index] and pair[1] in TARGET and pair[1] != TARGET[index]
    assert add_noise(SOURCE, TARGET, 0.3, seed=5) == noisy  # the draw is seeded
    assert add_noise(SOURCE, TARGET, 0.3, seed=6).labels != noisy.labels


def test_detection_counts_the_drops_of_each_label_by_rule() -> None:
    labels = [CLEAN, CLEAN, DUPLICATE, SWAPPED, SWAPPED, MISALIGNED]
    verdicts = [None, "length_ratio", "duplicate_pair", "wrong_language", None, None]
    found = {d.label: d for d in detection(labels, verdicts)}
    assert list(found) == [CLEAN, *NOISE_KINDS]
    assert (found[CLEAN].pairs, found[CLEAN].dropped, found[CLEAN].by_rule) == (2, 1, {"length_ratio": 1})
    assert found[SWAPPED].dropped_share == 0.5 and found[MISALIGNED].by_rule == {}


def test_a_smoke_study_catches_the_duplicates_and_swaps_and_trains_on_what_the_rules_kept(
        tmp_path, data_dir, monkeypatch, experiment) -> None:
    monkeypatch.setenv("VASWANI_CACHE", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)
    runs = tmp_path / "runs"
    payload = experiment("cleaning", tmp_path / "out", "--smoke", "--seeds", "0", "--variants", "cleaned",
                         "--runs-dir", str(runs), "--data-dir", str(data_dir))
    results = payload["results"]
    found = {row["label"]: row for row in results["detection"]}
    assert found[DUPLICATE]["dropped"] == found[DUPLICATE]["pairs"] > 0  # every copy of an earlier pair
    assert found[SWAPPED]["by_rule"].get("wrong_language", 0) >= 0.8 * found[SWAPPED]["pairs"]
    data = runs / "data" / "noise0.2"
    kept = (data / "cleaned.de").read_text(encoding="utf-8").splitlines()
    assert len(kept) == results["kept"] == results["pairs"] - sum(row["dropped"] for row in found.values())
    assert [row["variant"] for row in results["variants"]] == ["cleaned"]
    train = json.loads((runs / "cleaned-seed0" / "corpus.json").read_text())["splits"]["train"]
    assert train["pairs"] == len(kept) and train["files"][0]["path"] == str(data / "cleaned.de")
    assert (tmp_path / "out" / "detection.png").is_file() and (tmp_path / "out" / "bleu.png").is_file()
    # Another noise share writes its corpora elsewhere, so the run trained on this share is not reused for it.
    other = ["experiment", "cleaning", "--smoke", "--noise", "0.3", "--seeds", "0", "--variants", "cleaned",
             "--runs-dir", str(runs), "--data-dir", str(data_dir), "--out", str(tmp_path / "other"), "--device", "cpu"]
    assert main(other) == 2
    assert (runs / "data" / "noise0.3" / "noisy.de").is_file() and (data / "noisy.de").is_file()
