"""`vaswani experiment distillation --smoke`: the teacher translates the training sources into the distilled
corpus, the student preset trains on it and on the references, and each model is scored on both test sets and timed
on CTranslate2 int8."""

from __future__ import annotations

import json

import pytest
import yaml


def test_a_smoke_study_distills_the_teacher_into_two_students_and_times_all_three(tmp_path, data_dir, monkeypatch,
                                                                                 experiment) -> None:
    pytest.importorskip("ctranslate2")
    monkeypatch.setenv("VASWANI_CACHE", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)
    runs = tmp_path / "runs"
    payload = experiment("distillation", tmp_path / "out", "--smoke", "--seeds", "0", "--runs-dir", str(runs),
                         "--data-dir", str(data_dir))
    rows = payload["results"]["models"]
    assert [row["model"] for row in rows] == ["teacher", "student-distilled", "student-references"]
    assert all(row["sentences_per_second"] > 0 for row in rows) and rows[0]["speed_over_teacher"] == 1
    assert payload["settings"]["speed"]["quantization"] == "int8"

    distilled = runs / "synthetic" / "distilled-seed0"
    sources = (runs / "data" / "train.de").read_text(encoding="utf-8")
    assert (distilled / "distilled.de").read_text(encoding="utf-8") == sources  # the sources kept as they are
    assert len((distilled / "distilled.en").read_text(encoding="utf-8").splitlines()) == len(sources.splitlines())
    corpus = json.loads((runs / "student-distilled-seed0" / "corpus.json").read_text())
    assert corpus["splits"]["train"]["files"][1]["path"] == str(distilled / "distilled.en")
    student = yaml.safe_load((runs / "student-references-seed0" / "config.yaml").read_text())
    assert student["model"]["n_decoder_layers"] == 1

    # A teacher that exists already: no teacher trains, and its translations sit in a folder named by its weights,
    # which every seed's students share.
    given = runs / "teacher-seed0"
    payload = experiment("distillation", tmp_path / "out-given", "--smoke", "--seeds", "1", "--teacher", str(given),
                         "--runs-dir", str(runs), "--data-dir", str(data_dir))
    assert not (runs / "teacher-seed1").exists()
    teacher = payload["settings"]["teacher"]
    folder = runs / "synthetic" / f"distilled-{teacher['last_weights_sha256'][:12]}"
    plan = json.loads((folder / "vaswani.json").read_text())["details"]["plan"]
    assert plan["model"] == teacher["last_weights_sha256"]  # translated by the weights the teacher is scored at
    assert (folder / "distilled.en").read_text(encoding="utf-8") == (distilled / "distilled.en").read_text(
        encoding="utf-8")  # the same teacher, the same search: the same translations
    record = json.loads((runs / "student-distilled-seed1" / "corpus.json").read_text())
    assert record["splits"]["train"]["files"][1]["path"] == str(folder / "distilled.en")
    assert teacher["run"] == str(given) and teacher["updates"] == 6 and teacher["stop_reason"] == "max_steps"
    assert [(row["model"], row["seeds"]) for row in payload["results"]["models"]] == [
        ("teacher", 1), ("student-distilled", 1), ("student-references", 1)]


def test_a_teacher_that_is_no_german_english_run_is_refused_in_one_line(tmp_path, data_dir, capsys) -> None:
    from vaswani.cli import main

    run = tmp_path / "en-de"
    (run / "checkpoints" / "last").mkdir(parents=True)
    (run / "checkpoints" / "last" / "model.safetensors").write_bytes(b"")
    (run / "config.yaml").write_text("data:\n  direction: en-de\n")
    for teacher, says in ((tmp_path, "no checkpoints/last/model.safetensors"), (run, "it translates en to de")):
        assert main(["experiment", "distillation", "--smoke", "--teacher", str(teacher), "--runs-dir",
                     str(tmp_path / "runs"), "--out", str(tmp_path / "out"), "--data-dir", str(data_dir)]) == 2
        error = capsys.readouterr().err.strip()
        assert says in error and len(error.splitlines()) == 1


def test_the_real_studies_presets_are_a_256_wide_teacher_and_the_student_preset_on_whole_schedules(tmp_path) -> None:
    from vaswani.experiments.corpus_studies import study_preset
    from vaswani.experiments.distillation import STUDENT, TEACHER, TEACHER_SETTINGS
    from vaswani.experiments.regularization import STUDY_SETTINGS

    files, valid = [(tmp_path / "train.de", tmp_path / "train.en")], (tmp_path / "val.de", tmp_path / "val.en")
    teacher = yaml.safe_load(open(study_preset(TEACHER, [*STUDY_SETTINGS, *TEACHER_SETTINGS], tmp_path / "t.yaml",
                                               "de-en", files, valid)))
    student = yaml.safe_load(open(study_preset(STUDENT, STUDY_SETTINGS, tmp_path / "s.yaml", "de-en", files, valid)))
    assert teacher["model"]["d_model"] == 256 and student["model"]["d_model"] == 128
    assert student["model"]["n_decoder_layers"] == 1 and student["model"]["n_encoder_layers"] == 3
    for config in (teacher, student):
        assert config["train"]["max_minutes"] is None and config["train"]["final_test_splits"] == []
        assert config["data"]["train_files"] == [[str(path) for path in files[0]]]


def test_a_model_row_holds_the_means_over_its_seeds_and_its_speed_over_the_teachers() -> None:
    from vaswani.experiments.distillation import ModelResult, summarize

    rows = summarize([ModelResult("student-distilled", 0, {"test2016": 30.0, "test2017": 28.0}, 300.0),
                      ModelResult("teacher", 0, {"test2016": 34.0, "test2017": 31.0}, 100.0),
                      ModelResult("teacher", 1, {"test2016": 36.0, "test2017": 33.0}, 50.0)])
    assert [list(row.to_json().items()) for row in rows] == [
        [("model", "teacher"), ("seeds", 2), ("sentences_per_second", 75.0), ("test2016", 35.0), ("test2017", 32.0),
         ("speed_over_teacher", 1.0)],
        [("model", "student-distilled"), ("seeds", 1), ("sentences_per_second", 300.0), ("test2016", 30.0),
         ("test2017", 28.0), ("speed_over_teacher", 4.0)]]
