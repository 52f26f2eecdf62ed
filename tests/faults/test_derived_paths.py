"""Paths the program makes up are checked like the ones typed: a test set's name, which names its evaluation
folder, is a plain name (refused in one line before anything is written), a run's corpus.json is never a
reason to write somewhere, and the folder data is prepared into follows the output rule whoever chose it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from vaswani.errors import VaswaniError
from vaswani.io import MAX_NAME_CHARS, check_name, write_manifest

BAD_NAMES = {
    "separator": "x/../../victim",
    "parent": "..",
    "hidden": ".cache",
    "long": "t" * (MAX_NAME_CHARS + 1),
}


@pytest.mark.parametrize("case", BAD_NAMES)
def test_a_bad_name_is_one_error_naming_where_it_came_from(case: str) -> None:
    with pytest.raises(VaswaniError) as error:
        check_name(BAD_NAMES[case], "data.test_files")
    assert str(error.value).startswith("data.test_files: the name ") and "\n" not in str(error.value)


def test_plain_names_pass() -> None:
    assert check_name("newstest2017", "x") == "newstest2017" and check_name("t" * MAX_NAME_CHARS, "x")


@pytest.mark.parametrize("case", BAD_NAMES)
def test_a_test_set_name_in_a_preset_is_refused_before_anything_is_written(run, assert_one_line, tmp_path,
                                                                          local_corpus, case: str) -> None:
    src, tgt = local_corpus
    preset = tmp_path / "preset.yaml"
    preset.write_text(json.dumps({
        "data": {"dataset": "local", "train_files": [[str(src), str(tgt)]],
                 "test_files": {BAD_NAMES[case]: [str(src), str(tgt)]}},
        "train": {"max_steps": 1, "final_model": True}}))
    code, _, err = run("train", "--preset", preset, "--run-dir", tmp_path / "run")
    assert_one_line(code, err, 2, "data.test_files", "the name")
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("file_name", [".hidden.de", "t" * (MAX_NAME_CHARS + 1) + ".de"])
def test_a_test_file_whose_name_is_no_name_is_refused(run, assert_one_line, tmp_path, local_corpus,
                                                     file_name: str) -> None:
    src, tgt = local_corpus
    test_src, test_tgt = tmp_path / file_name, tmp_path / (file_name[:-3] + ".en")
    test_src.write_text("Ein Hund.\n")
    test_tgt.write_text("A dog.\n")
    code, _, err = run("prepare", "--src", src, "--tgt", tgt, "--test-src", test_src, "--test-tgt", test_tgt,
                       "--out", tmp_path / "prepared")
    assert_one_line(code, err, 2, "--test-src", "the name")
    assert not (tmp_path / "prepared").exists()


@pytest.fixture
def recorded(tmp_path) -> tuple[Path, Path]:
    """A run directory whose corpus.json names a folder as where its data was prepared."""
    run_dir, folder = tmp_path / "run", tmp_path / "elsewhere"
    run_dir.mkdir()
    folder.mkdir()
    (run_dir / "corpus.json").write_text(json.dumps({"prepared": str(folder)}))
    return run_dir, folder


def test_a_recorded_folder_that_is_not_prepared_data_is_never_used(recorded) -> None:
    from vaswani.training.corpus_record import recorded_out_dir

    run_dir, folder = recorded
    assert recorded_out_dir(run_dir) is None  # a folder of the user's: the data goes to the default folder
    write_manifest(folder, "checkpoint")
    assert recorded_out_dir(run_dir) is None
    write_manifest(folder, "prepared data")
    assert recorded_out_dir(run_dir) == folder  # what the run prepared, found from any directory


def test_data_is_never_prepared_inside_another_output(tmp_path, local_corpus, monkeypatch) -> None:
    from vaswani.data.pipeline import prepare_dataset

    src, tgt = local_corpus
    checkpoint = tmp_path / "checkpoint"
    checkpoint.mkdir()
    write_manifest(checkpoint, "checkpoint")
    monkeypatch.chdir(checkpoint)  # the default folder, runs/data/..., would be inside the checkpoint
    with pytest.raises(VaswaniError, match="lies inside .*checkpoint, a checkpoint vaswani wrote"):
        prepare_dataset(src_file=src, tgt_file=tgt, vocab_size=300)
    assert sorted(p.name for p in checkpoint.iterdir()) == ["vaswani.json"]


@pytest.fixture
def preset_beside_its_files(tmp_path, local_corpus) -> Path:
    """presets/run.yaml naming its corpus by paths relative to its own folder, and another folder holding files of
    the same names (what a relative path would find from there)."""
    src, tgt = local_corpus
    (tmp_path / "corpus").mkdir()
    for path in (src, tgt):
        (tmp_path / "corpus" / path.name).write_bytes(path.read_bytes())
        (tmp_path / "corpus" / f"t16{path.suffix}").write_text("Ein Hund.\n" if path.suffix == ".de" else "A dog.\n")
    (tmp_path / "presets").mkdir()
    preset = tmp_path / "presets" / "run.yaml"
    preset.write_text(json.dumps({
        "data": {"dataset": "local", "train_files": [["../corpus/train.de", "../corpus/train.en"]],
                 "test_files": {"t16": ["../corpus/t16.de", "../corpus/t16.en"]}, "data_dir": "downloads"},
        "train": {"max_steps": 1}}))
    (tmp_path / "elsewhere" / "corpus").mkdir(parents=True)
    for name in ("t16.de", "t16.en"):
        (tmp_path / "elsewhere" / "corpus" / name).write_text("Something else entirely.\n")
    return preset


def test_relative_paths_in_a_preset_name_files_beside_it(preset_beside_its_files, tmp_path, monkeypatch) -> None:
    from vaswani.training.presets import load_preset

    monkeypatch.chdir(tmp_path / "elsewhere" / "corpus")  # where "../corpus/t16.de" is another file
    data = load_preset(str(preset_beside_its_files)).data
    corpus = tmp_path / "corpus"
    assert data.train_files == ((str(corpus / "train.de"), str(corpus / "train.en")),)
    assert data.test_files == {"t16": (str(corpus / "t16.de"), str(corpus / "t16.en"))}
    assert data.data_dir == str(tmp_path / "presets" / "downloads")


def test_the_references_of_a_run_are_the_files_it_recorded_unchanged(preset_beside_its_files, tmp_path,
                                                                    monkeypatch) -> None:
    """finalize and a final evaluation read the test sets through split_texts: a file that changed since the run
    recorded it (corpus.json: path and sha256) is refused, naming it, instead of scored."""
    import dataclasses

    from vaswani.data.fingerprints import fingerprint
    from vaswani.training.data import split_texts
    from vaswani.training.presets import load_preset

    monkeypatch.chdir(tmp_path)
    config = load_preset(str(preset_beside_its_files))
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    recorded = {split.name: {"files": [dataclasses.asdict(record) for record in fingerprint(split).files]}
                for split in config.data.files().splits()}
    (run_dir / "corpus.json").write_text(json.dumps({"splits": recorded}))
    (tmp_path / "corpus" / "t16.en").write_text("A cat.\n")
    with pytest.raises(VaswaniError, match=r"t16\.en changed since this run started") as error:
        split_texts(config, ["t16"], run_dir)
    assert "\n" not in str(error.value)
    assert not (tmp_path / "runs").exists()  # nothing prepared
