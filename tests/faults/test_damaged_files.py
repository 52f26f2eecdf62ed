"""Every file the tool reads back, damaged four ways, and read back by the command that reads it: a checkpoint's
files (translate), a run's (resume), a prepared corpus and its cache (prepare), a classifier's (classify predict),
evaluation and experiment results (compare, classify summary).

Each case asserts the exit status, one error line naming the damaged file, and the directory's state afterwards:
untouched when the command refuses; rebuilt, equal to what it was, when the file is a cache the tool can make again.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from vaswani.data.cache import load_encoded


def truncated(data: bytes) -> bytes:
    return data[: len(data) // 2]


def emptied(data: bytes) -> bytes:
    return b""


def flipped(data: bytes) -> bytes:
    """One bit changed in the middle of the file (past whitespace, so the change is never only in the layout)."""
    out = bytearray(data)
    middle = len(out) // 2
    while middle < len(out) - 1 and chr(out[middle]).isspace():
        middle += 1
    out[middle] ^= 0x01
    return bytes(out)


def garbage(data: bytes) -> bytes:
    return bytes(range(255, -1, -1)) * 2


DAMAGES: dict[str, Callable[[bytes], bytes]] = {f.__name__: f for f in (truncated, emptied, flipped, garbage)}
# Files checked by size and sha256 only (the manifest): a shorter and a changed one are the two cases to meet.
CHECKSUMMED = ("truncated", "flipped")


def matrix(names_all: list[str], names_checksummed: list[str] = ()) -> list:
    """(file, damage) cases: every damage for files that are parsed, the checksummed two for the others."""
    return [pytest.param(name, how, id=f"{name}-{how}") for name in names_all for how in DAMAGES] + [
        pytest.param(name, how, id=f"{name}-{how}") for name in names_checksummed for how in CHECKSUMMED]


def damage(path: Path, how: str) -> None:
    path.write_bytes({**DAMAGES, "cut_inside": cut_inside}[how](path.read_bytes()))


def without_lock(snapshot: dict) -> dict:
    return {name: value for name, value in snapshot.items() if Path(name).name != ".lock"}


# ---- a checkpoint, read by translate ------------------------------------------------------------------------------

@pytest.fixture
def checkpoint_with_search(checkpoint: Path) -> Path:
    """The tiny checkpoint with a stored search, as the end of a training run leaves one."""
    from vaswani.decoding.config import SearchConfig, StoredSearch
    from vaswani.io import write_manifest
    from vaswani.model.serialization import CHECKPOINT_KIND

    StoredSearch.of(SearchConfig(beam_size=2, max_len_a=0.0, max_len_b=5)).write(checkpoint)
    write_manifest(checkpoint, CHECKPOINT_KIND)
    return checkpoint


@pytest.mark.parametrize("name, how", matrix(["model.json", "tokenizer.json", "search.json", "vaswani.json"],
                                              ["model.safetensors"]))
def test_a_damaged_checkpoint_file_is_named_and_nothing_is_written(run, assert_one_line, state, checkpoint_with_search,
                                                                   source_file, name: str, how: str) -> None:
    checkpoint = checkpoint_with_search
    code, _, err = run("translate", "--checkpoint", checkpoint, "--input", source_file, "--device", "cpu")
    assert code == 0, err
    damage(checkpoint / name, how)
    before = state(checkpoint)
    code, out, err = run("translate", "--checkpoint", checkpoint, "--input", source_file, "--device", "cpu")
    assert_one_line(code, err, 2, str(checkpoint / name))
    assert out == "" and state(checkpoint) == before


# ---- the CTranslate2 conversion, read by translate on that engine ----------------------------------------------------

# The conversion's files are checked by size and sha256 (its manifest), so every damage of them is a change; its
# manifest is parsed, and only the damages that leave no JSON are invalid by construction (a flipped bit may fall in
# a date it records). "missing": a partial conversion; "foreign": the manifest of another checkpoint's conversion.
CONVERSION_CASES = [pytest.param(name, how, id=f"{name}-{how}")
                    for name in ("model.bin", "config.json", "shared_vocabulary.json") for how in DAMAGES] + [
    pytest.param("vaswani.json", how, id=f"vaswani.json-{how}") for how in ("truncated", "emptied", "garbage")] + [
    pytest.param("vaswani.json", how, id=f"vaswani.json-{how}") for how in ("missing", "foreign")]


@pytest.mark.parametrize("name, how", CONVERSION_CASES)
def test_a_damaged_conversion_is_converted_again_and_never_used(run, checkpoint, source_file, name: str,
                                                                how: str) -> None:
    pytest.importorskip("ctranslate2")
    from vaswani.decoding.ct2_model import CONVERTED_DIRECTORY, checkpoint_key, conversion_problem

    translate = ["translate", "--checkpoint", checkpoint, "--input", source_file, "--engine", "ctranslate2",
                 "--device", "cpu", "--beam", "1", "--max-len-a", "0", "--max-len-b", "6", "--threads", "1"]
    code, expected, err = run(*translate)
    assert code == 0, err
    [conversion] = (checkpoint / CONVERTED_DIRECTORY).iterdir()
    if how == "missing":
        (conversion / name).unlink()
    elif how == "foreign":
        record = json.loads((conversion / name).read_text())
        record["details"]["checkpoint_sha256"] = "0" * 64
        (conversion / name).write_text(json.dumps(record))
    else:
        damage(conversion / name, how)
    code, out, err = run(*translate)
    assert code == 0 and "Traceback" not in err, err
    notes = [line for line in err.splitlines() if "converting again" in line]
    assert len(notes) == 1 and str(conversion) in notes[0], err  # says why, naming the conversion
    if how in DAMAGES:
        assert str(conversion / name) in notes[0], err
    assert out == expected  # translated by a whole conversion of the same weights
    assert conversion_problem(conversion, checkpoint_key(checkpoint), "float32") is None  # whole again


# ---- a run, read back by a resume ---------------------------------------------------------------------------------

@pytest.mark.parametrize("name, how", matrix(["checkpoints/step_0000002/meta.json", "vaswani.json"],
                                              ["checkpoints/step_0000002/trainer_state.pt"]))
def test_a_damaged_run_file_stops_the_resume_and_the_run_is_left_as_it_was(run, assert_one_line, state, trained_run,
                                                                           train_args, tmp_path, workdir, monkeypatch,
                                                                           name: str, how: str) -> None:
    monkeypatch.chdir(workdir)
    run_dir = Path(shutil.copytree(trained_run, tmp_path / "run", symlinks=True))
    damage(run_dir / name, how)
    before = without_lock(state(run_dir))
    code, _, err = run(*train_args(run_dir, "--resume"))
    assert_one_line(code, err, 2, str(run_dir / name))
    assert without_lock(state(run_dir)) == before


def cut_inside(data: bytes) -> bytes:
    """The closing brace and newline of the record nearest the middle taken out: that record and the next run
    together on one line, which no JSON reader accepts, whatever numbers the run logged."""
    ends = [i for i in range(len(data) - 2) if data[i : i + 2] == b"}\n"]  # every record's but the last
    assert ends, "the log needs two records to break one of them"
    end = min(ends, key=lambda i: abs(i - len(data) // 2))
    return data[:end] + data[end + 2 :]


# A record's numbers carry no checksum (the log grows by appends), so the cases are damage to its structure.
@pytest.mark.parametrize("how, code", [("cut_inside", 2), ("garbage", 2), ("truncated", 0)])
def test_a_damaged_metrics_log_is_named_unless_only_its_last_record_is_torn(run, assert_one_line, trained_run,
                                                                           train_args, tmp_path, workdir, monkeypatch,
                                                                           how: str, code: int) -> None:
    from vaswani.training.metrics import read_metrics

    monkeypatch.chdir(workdir)
    run_dir = Path(shutil.copytree(trained_run, tmp_path / "run", symlinks=True))
    metrics = run_dir / "metrics.jsonl"
    damage(metrics, how)
    before = metrics.read_bytes()
    status, _, err = run(*train_args(run_dir, "--resume"))
    if code == 2:  # a damaged record is not a torn one: named, and the log kept for the user to look at
        assert_one_line(status, err, 2, f"{metrics}:", "the metrics log is damaged")
        assert metrics.read_bytes() == before
    else:  # a kill while appending: the torn record is dropped and the run continues from its checkpoint
        assert status == 0, err
        whole = before[: before.rindex(b"\n") + 1]  # the records before the torn one
        assert metrics.read_bytes() == whole and len(read_metrics(metrics)) == whole.count(b"\n") > 0


# ---- prepared data and its cache, read by prepare (and every training run) ------------------------------------------

@pytest.fixture(scope="module")
def prepared(tmp_path_factory, local_corpus) -> Path:
    """A prepared local corpus: tokenizer, its description, the manifest and one cache entry."""
    from vaswani.data.pipeline import prepare_dataset

    src, tgt = local_corpus
    out = tmp_path_factory.mktemp("prepared") / "out"
    prepare_dataset(src_file=src, tgt_file=tgt, out_dir=out, vocab_size=400)
    return out


@pytest.mark.parametrize("name, how", matrix(["meta.json", "vaswani.json"],
                                              ["src_ids.npy", "src_offsets.npy", "tgt_ids.npy", "tgt_offsets.npy",
                                               "line_index.npy"]))
def test_a_damaged_cache_is_named_and_rebuilt_as_it_was(run, state, prepared, local_corpus, tmp_path, name: str,
                                                       how: str) -> None:
    out = Path(shutil.copytree(prepared, tmp_path / "out"))
    entry = next((out / "cache").iterdir())
    original = state(out)
    damage(entry / name, how)
    src, tgt = local_corpus
    code, report, err = run("prepare", "--src", src, "--tgt", tgt, "--out", out, "--vocab-size", "400")
    assert code == 0, err
    warnings = err.strip().splitlines()
    assert len(warnings) == 1 and warnings[0].startswith(f"{entry}: ") and "rebuilding it" in warnings[0], err
    assert "Traceback" not in err and "encoded" in report  # rebuilt, not read
    after = state(out)
    for name_, value in original.items():  # the same tokenizer, the same ids, the same line numbers
        if not name_.endswith(("meta.json", f"{entry.name}/vaswani.json")):
            assert after[name_] == value, name_
    rebuilt, before = (json.loads(files[str((entry / "meta.json").relative_to(out))]) for files in (after, original))
    rebuilt["stats"].pop("seconds"), before["stats"].pop("seconds")  # the only thing that differs: the time taken
    assert rebuilt == before and sorted(after) == sorted(original)
    load_encoded(entry)  # whole again: its manifest holds the files as they are now


@pytest.mark.parametrize("how", DAMAGES)
@pytest.mark.parametrize("name", ["tokenizer.json", "tokenizer_info.json", "vaswani.json"])
def test_a_damaged_prepared_tokenizer_is_named_and_nothing_is_encoded(run, assert_one_line, state, prepared,
                                                                      local_corpus, tmp_path, name: str,
                                                                      how: str) -> None:
    out = Path(shutil.copytree(prepared, tmp_path / "out"))
    damage(out / name, how)
    before = state(out)
    src, tgt = local_corpus
    code, _, err = run("prepare", "--src", src, "--tgt", tgt, "--out", out, "--vocab-size", "400")
    assert_one_line(code, err, 2, str(out / name))
    assert state(out) == before


# ---- a classifier, read by classify predict --------------------------------------------------------------------------

@pytest.mark.parametrize("name, how", matrix(["classifier.json", "word_tokenizer.json", "vaswani.json"],
                                              ["model.safetensors"]))
def test_a_damaged_classifier_file_is_named(run, assert_one_line, state, classifier, name: str, how: str) -> None:
    code, _, err = run("classify", "predict", "--model", classifier, "--text", "fire in the forest")
    assert code == 0, err
    damage(classifier / name, how)
    before = state(classifier)
    code, _, err = run("classify", "predict", "--model", classifier, "--text", "fire in the forest")
    assert_one_line(code, err, 2, str(classifier / name))
    assert state(classifier) == before


@pytest.mark.parametrize("field, value, fragment", [
    ("labels", "01", '"labels" is "01", not a list of label strings'),  # two labels, silently
    ("labels", ["0", "0"], "names a label twice"),
    ("pooling", "max", '"pooling" is "max", not one of'),
    ("tokenizer", "sentencepiece", '"tokenizer" is "sentencepiece"'),
    ("max_len", 10**9, '"max_len" is 1000000000, not a whole number from 3'),
    ("extra_text_columns", "keyword", '"extra_text_columns" is "keyword"'),
    ("lowercase", "yes", '"lowercase" is "yes", not true or false'),
    ("n_classes", 3, '"n_classes" is 3 but "labels" has 2'),
    ("model", {"d_model": 0}, "model.d_model=0"),
    ("colour", "blue", "unknown field(s) ['colour']"),
])
def test_a_classifier_description_with_a_wrong_field_is_named(run, assert_one_line, classifier, field: str, value,
                                                               fragment: str) -> None:
    from vaswani.classification.checkpoint import CLASSIFIER_KIND
    from vaswani.io import write_manifest

    info = json.loads((classifier / "classifier.json").read_text())
    info[field] = {**info["model"], **value} if field == "model" else value
    (classifier / "classifier.json").write_text(json.dumps(info))
    write_manifest(classifier, CLASSIFIER_KIND)  # as a tool that wrote it would: the fields themselves are checked
    code, _, err = run("classify", "predict", "--model", classifier, "--text", "fire in the forest")
    assert_one_line(code, err, 2, str(classifier / "classifier.json"), fragment)


# ---- results, read by compare and classify summary ------------------------------------------------------------

@pytest.fixture
def evaluation(run, checkpoint, source_file, references, tmp_path) -> Path:
    out = tmp_path / "evaluation"
    code, _, err = run("evaluate", "--checkpoint", checkpoint, "--src", source_file, "--ref", references, "--out", out,
                       "--beam", "1", "--max-len-a", "0", "--max-len-b", "4", "--device", "cpu")
    assert code == 0, err
    return out


@pytest.mark.parametrize("how", DAMAGES)
@pytest.mark.parametrize("name", ["results.json", "vaswani.json"])
def test_a_damaged_evaluation_is_named_by_compare_and_nothing_is_written(run, assert_one_line, state, evaluation,
                                                                         tmp_path, name: str, how: str) -> None:
    damage(evaluation / name, how)
    before = state(tmp_path)
    code, _, err = run("compare", evaluation, "--out", tmp_path / "table")
    assert_one_line(code, err, 2, str(evaluation / name))
    assert state(tmp_path) == before


@pytest.mark.parametrize("path, value, fragment", [
    (("search", "beam_size"), "4", 'search.beam_size is "4", not a whole number'),
    (("search", "length_norm"), "gmnt", 'field "search.length_norm" is "gmnt", not one of gnmt, power, average, none'),
    (("engine", "quantization"), 8, 'field "engine.quantization" is 8, not a string'),
    (("speed", "sentences_per_second"), None, "speed.sentences_per_second is null, not a number"),
    (("hardware",), [], "hardware is [], not an object"),
    (("bleu",), True, "bleu is true, not a number"),
    (("git", "commit"), 7, "git.commit is 7, not a string"),
])
def test_a_results_file_with_a_wrong_field_is_named_by_compare(run, assert_one_line, evaluation, tmp_path,
                                                               path: tuple[str, ...], value, fragment: str) -> None:
    results = json.loads((evaluation / "results.json").read_text())
    *parents, last = path
    target = results
    for key in parents:
        target = target[key]
    target[last] = value
    file = tmp_path / "edited.json"  # a results.json on its own: no manifest to check it against
    file.write_text(json.dumps(results))
    code, _, err = run("compare", file, "--out", tmp_path / "table")
    assert_one_line(code, err, 2, str(file), fragment)
    assert not (tmp_path / "table").exists()


@pytest.fixture(scope="module")
def experiment(tmp_path_factory) -> Path:
    """The results of `classify experiment`: one seed, one epoch, on 60 short texts."""
    from vaswani.cli import main

    root = tmp_path_factory.mktemp("experiment")
    csv = root / "texts.csv"
    rows = [("forest fire near the town", 1), ("what a sunny day at the beach", 0)] * 30
    csv.write_text("text,target\n" + "".join(f"{text} {i},{label}\n" for i, (text, label) in enumerate(rows)))
    assert main(["classify", "experiment", "--csv", str(csv), "--seeds", "0", "--epochs", "1", "--preset", "tiny",
                 "--no-progress", "--out", str(root / "results"), "--runs-dir", str(root / "runs")]) == 0
    return root / "results"


@pytest.mark.parametrize("how", DAMAGES)
@pytest.mark.parametrize("name", ["results.json", "vaswani.json"])
def test_damaged_experiment_results_are_named_by_the_summary(run, assert_one_line, state, experiment, tmp_path,
                                                             name: str, how: str) -> None:
    folder = Path(shutil.copytree(experiment, tmp_path / "results"))
    damage(folder / name, how)
    before = state(folder)
    code, _, err = run("classify", "summary", folder)
    assert_one_line(code, err, 2, str(folder / name))
    assert state(folder) == before  # no README written
