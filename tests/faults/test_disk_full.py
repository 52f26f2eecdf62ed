"""A full disk against every command that writes: a file-size limit (``ulimit -f``, set in this process) makes the
first large write fail as a full disk would. Each command must stop with one line naming the file it could not
write, exit 1 (the machine, not the input), and leave its output as it was: no half file, no staging directory, an
earlier output intact."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

# Small enough that weights (hundreds of KB) cannot be written, large enough for a config, a tokenizer or a record.
NO_ROOM_FOR_WEIGHTS = 200_000
FULL = "File too large"  # what EFBIG says; a full disk says "No space left on device" in the same place


def test_train_stops_at_the_checkpoint_with_one_line_and_no_half_checkpoint(run, assert_one_line, disk_full,
                                                                           leftovers, train_args, workdir,
                                                                           monkeypatch) -> None:
    monkeypatch.chdir(workdir)
    run_dir = workdir / "full-train"
    with disk_full(NO_ROOM_FOR_WEIGHTS):
        code, _, err = run(*train_args(run_dir))
    assert_one_line(code, err, 1, str(run_dir / "checkpoints" / "step_0000002"), FULL)
    assert list((run_dir / "checkpoints").iterdir()) == [] and leftovers(run_dir) == []
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["kind"] for r in records] == ["train", "train", "valid"]  # every record whole


def test_resume_stops_with_one_line_and_keeps_the_checkpoint_it_resumed_from(run, assert_one_line, disk_full, state,
                                                                            leftovers, train_args, trained_run,
                                                                            workdir, monkeypatch) -> None:
    from vaswani.training.checkpoint import load_trainer_state

    monkeypatch.chdir(workdir)
    run_dir = Path(shutil.copytree(trained_run, workdir / "full-resume", symlinks=True))
    before = state(run_dir / "checkpoints")
    with disk_full(NO_ROOM_FOR_WEIGHTS):
        code, _, err = run(*train_args(run_dir, "--set", "train.max_steps=3", "--resume"))
    assert_one_line(code, err, 1, str(run_dir / "checkpoints" / "step_0000003"), FULL)
    assert state(run_dir / "checkpoints") == before and leftovers(run_dir) == []
    directory, saved = load_trainer_state(run_dir)  # resumable as it was
    assert directory.name == "step_0000002" and saved.progress["step"] == 2


def test_tensorboards_writer_thread_fails_in_one_line_without_a_thread_traceback(tmp_path, disk_full,
                                                                                capfd) -> None:
    from vaswani.errors import EnvironmentFault
    from vaswani.training.metrics import MetricsLog, read_metrics

    log = MetricsLog(tmp_path)
    with disk_full(3000), pytest.raises(EnvironmentFault) as fault:
        for step in range(1, 10_000):
            log.write("train", step, loss=1.0, lr=0.1)
    assert str(fault.value).startswith(f"{tmp_path}/") and FULL in str(fault.value)
    with pytest.raises(EnvironmentFault):  # closing meets the same fault, and says it the same way
        log.close()
    err = capfd.readouterr().err
    assert "Traceback" not in err and "Exception in thread" not in err, err
    assert all(r.kind == "train" for r in read_metrics(tmp_path / "metrics.jsonl"))  # whole records only


@pytest.mark.parametrize("existing", [False, True], ids=["new", "replacing"])
def test_average_writes_a_whole_checkpoint_or_nothing(run, assert_one_line, disk_full, state, leftovers, checkpoint,
                                                      tmp_path, existing: bool) -> None:
    other = Path(shutil.copytree(checkpoint, tmp_path / "other"))
    out = tmp_path / "average"
    if existing:  # an earlier average, which --force replaces
        assert run("average", "--checkpoints", checkpoint, checkpoint, "--out", out)[0] == 0
    before = state(tmp_path)
    with disk_full(NO_ROOM_FOR_WEIGHTS):
        code, _, err = run("average", "--checkpoints", checkpoint, other, "--out", out, *(["--force"] * existing))
    assert_one_line(code, err, 1, str(out / "model.safetensors"), FULL)
    assert state(tmp_path) == before and leftovers(tmp_path) == []


@pytest.mark.parametrize("fmt", ["hf", "ctranslate2"])
def test_export_writes_a_whole_directory_or_nothing(run, assert_one_line, disk_full, state, leftovers, checkpoint,
                                                    tmp_path, fmt: str) -> None:
    pytest.importorskip("transformers" if fmt == "hf" else "ctranslate2")
    from vaswani.export.commands import EXPORT_KIND
    from vaswani.io import write_manifest

    out = tmp_path / "exported"
    out.mkdir()
    (out / "earlier.txt").write_text("an earlier export")
    write_manifest(out, EXPORT_KIND, writer="export")
    before = state(tmp_path)
    with disk_full(NO_ROOM_FOR_WEIGHTS):
        code, _, err = run("export", "--checkpoint", checkpoint, "--format", fmt, "--out", out, "--force")
    assert_one_line(code, err, 1, str(out), FULL)
    assert state(tmp_path) == before and leftovers(tmp_path) == []


def test_a_second_evaluation_on_a_full_disk_keeps_the_first_whole(run, assert_one_line, disk_full, state, leftovers,
                                                                  checkpoint, source_file, references,
                                                                  tmp_path) -> None:
    out = tmp_path / "eval"
    search = ["--beam", "1", "--max-len-a", "0", "--max-len-b", "4", "--device", "cpu"]
    code, _, err = run("evaluate", "--checkpoint", checkpoint, "--src", source_file, "--ref", references, "--out", out,
                       *search)
    assert code == 0, err
    before = state(tmp_path)
    with disk_full(1000):  # results.json is a few KB
        code, _, err = run("evaluate", "--checkpoint", checkpoint, "--src", source_file, "--ref", references, "--out",
                           out, "--beam", "2", *search[2:])
    assert_one_line(code, err, 1, str(out / "results.json"), FULL)
    assert state(tmp_path) == before and leftovers(tmp_path) == []  # no new results.json beside old hypotheses


def test_compare_writes_its_table_and_summary_whole_or_not_at_all(run, assert_one_line, disk_full, state, leftovers,
                                                                  checkpoint, source_file, references,
                                                                  tmp_path) -> None:
    evaluation = tmp_path / "eval"
    code, _, err = run("evaluate", "--checkpoint", checkpoint, "--src", source_file, "--ref", references, "--out",
                       evaluation, "--beam", "1", "--max-len-a", "0", "--max-len-b", "4", "--device", "cpu")
    assert code == 0, err
    out = tmp_path / "table"
    assert run("compare", evaluation, "--out", out)[0] == 0
    before = state(tmp_path)
    with disk_full(300):
        code, _, err = run("compare", evaluation, evaluation / "results.json", "--out", out)
    assert_one_line(code, err, 1, str(out), FULL)
    assert state(tmp_path) == before and leftovers(tmp_path) == []


def test_prepare_keeps_no_half_cache_and_a_second_run_finishes_it(run, assert_one_line, disk_full, leftovers,
                                                                  local_corpus, tmp_path) -> None:
    src, tgt = local_corpus
    out = tmp_path / "prepared"
    command = ["prepare", "--src", src, "--tgt", tgt, "--out", out, "--vocab-size", "400"]
    with disk_full(40_000):  # the tokenizer fits, the arrays of 2,000 pairs do not
        code, _, err = run(*command)
    line = assert_one_line(code, err, 1, str(out / "cache"), ".npy", FULL)
    assert ".tmp" not in line and leftovers(out) == []
    assert sorted(p.name for p in out.iterdir()) == ["cache", "tokenizer.json", "tokenizer_info.json", "vaswani.json"]
    assert list((out / "cache").iterdir()) == []
    code, report, err = run(*command)
    assert code == 0 and "(loaded)" in report, err  # the whole tokenizer is used, the cache written now


def test_classify_train_writes_nothing_when_the_model_does_not_fit(run, assert_one_line, disk_full, leftovers,
                                                                   tmp_path) -> None:
    csv = tmp_path / "tweets.csv"
    rows = [("forest fire near the town", 1), ("what a sunny day at the beach", 0)] * 30
    csv.write_text("text,target\n" + "".join(f"{text} {i},{label}\n" for i, (text, label) in enumerate(rows)))
    out = tmp_path / "classifier"
    with disk_full(60_000):
        code, _, err = run("classify", "train", "--csv", csv, "--out", out, "--epochs", "1", "--preset", "tiny",
                           "--no-progress", "--examples", "0")
    assert_one_line(code, err, 1, str(out), FULL)
    assert not out.exists() and leftovers(tmp_path) == []


@pytest.mark.parametrize("command", ["translate", "classify predict"])
def test_an_output_file_is_written_whole_or_not_at_all(run, assert_one_line, disk_full, leftovers, checkpoint,
                                                       classifier, source_file, tmp_path, command: str) -> None:
    output = tmp_path / "out.txt"
    if command == "translate":
        argv = ["translate", "--checkpoint", checkpoint, "--input", source_file, "--beam", "1", "--max-len-b", "30",
                "--max-len-a", "0", "--device", "cpu", "--engine", "torch", "--output", output]
    else:
        csv = tmp_path / "texts.csv"
        csv.write_text("text\n" + "fire in the forest\n" * 50)
        argv = ["classify", "predict", "--model", classifier, "--csv", csv, "--output", output]
    with disk_full(40):
        code, _, err = run(*argv)
    assert_one_line(code, err, 1, str(output), FULL)
    assert not output.exists() and leftovers(tmp_path) == []


def test_a_ctranslate2_conversion_that_does_not_fit_names_its_destination(run, assert_one_line, disk_full, state,
                                                                          checkpoint, source_file, tmp_path,
                                                                          monkeypatch) -> None:
    pytest.importorskip("ctranslate2")
    monkeypatch.setenv("VASWANI_CACHE", str(tmp_path / "cache"))
    before = state(checkpoint)
    with disk_full(40):
        code, _, err = run("translate", "--checkpoint", checkpoint, "--input", source_file, "--engine",
                           "ctranslate2", "--length-norm", "power", "--device", "cpu", "--output",
                           tmp_path / "out.txt")
    assert_one_line(code, err, 1, "the CTranslate2 conversion cannot be written", "File too large")
    assert state(checkpoint) == before and not (tmp_path / "out.txt").exists()
