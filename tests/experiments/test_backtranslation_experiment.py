"""`vaswani experiment backtranslation --smoke`: the reverse model trains on one half, its back-translations of the
other half's English become the synthetic part of a tagged forward run, and each forward run is scored on both
test sets, one row a variant."""

from __future__ import annotations

import json


def test_a_smoke_study_back_translates_the_other_half_and_trains_a_tagged_run_on_it(tmp_path, data_dir, monkeypatch,
                                                                                    experiment) -> None:
    monkeypatch.setenv("VASWANI_CACHE", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)
    runs = tmp_path / "runs"
    payload = experiment("backtranslation", tmp_path / "out", "--smoke", "--seeds", "0", "--variants", "half",
                         "bt-sample-tagged", "--runs-dir", str(runs), "--data-dir", str(data_dir))
    rows = payload["results"]["variants"]
    assert [row["variant"] for row in rows] == ["half", "bt-sample-tagged"]
    assert all(0 <= row["test2016"] <= 100 and 0 <= row["test2017"] <= 100 for row in rows)

    synthetic = runs / "synthetic" / "sample-seed0"
    original = (runs / "data" / "b.en").read_text(encoding="utf-8")
    assert (synthetic / "backtranslated.en").read_text(encoding="utf-8") == original  # the targets: the text itself
    assert len((synthetic / "backtranslated.de").read_text(encoding="utf-8").splitlines()) == len(original.splitlines())
    assert not (runs / "synthetic" / "beam-seed0").exists()  # no variant asked for beam back-translations
    parts = json.loads((runs / "bt-sample-tagged-seed0" / "corpus.json").read_text())["splits"]["train"]["parts"]
    assert [(part["files"][0], part["tag"]) for part in parts] == [(str(runs / "data" / "a.de"), ""),
                                                                   (str(synthetic / "backtranslated.de"), "<BT>")]
    reverse = json.loads((runs / "reverse-seed0" / "corpus.json").read_text())
    assert reverse["languages"]["source"] == "en"  # the reverse direction, on half a
