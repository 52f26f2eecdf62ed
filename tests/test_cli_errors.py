"""Every user error and environment fault the command line can meet ends in one line on stderr and an exit status
(2: the input, 1: the environment), never a traceback; a real bug still raises. The CLI runs in-process."""

from __future__ import annotations

import io
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Callable

import pytest
import torch

from vaswani.cli import main
from vaswani.errors import VaswaniError


@pytest.fixture
def run(capsys) -> Callable[..., tuple[int, str]]:
    """Run ``vaswani ARGS`` in this process; return (exit status, stderr). An exception escaping main() is a
    traceback the user would have seen, so the test fails with it."""

    def call(*args: str) -> tuple[int, str]:
        try:
            code = main([str(a) for a in args])
        except SystemExit as exit:  # argparse's own usage errors
            code = exit.code
        err = capsys.readouterr().err
        return code, err

    return call


def current_umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def unwritable_directory(tmp_path: Path) -> Path:
    """A directory this process cannot create files in (as root, chmod does not stop us: use /proc)."""
    if os.geteuid() != 0:
        path = tmp_path / "read-only"
        path.mkdir()
        path.chmod(0o555)
        return path
    path = Path("/proc/driver")
    try:
        tempfile.mkstemp(dir=path)
    except OSError:
        return path
    pytest.skip("no unwritable directory available to root here")


def assert_clean(code: int, err: str, expected_code: int, *fragments: str) -> None:
    assert code == expected_code, err
    lines = [line for line in err.splitlines() if "error:" in line]
    assert len(lines) == 1, err  # one line, naming what is wrong
    assert "Traceback" not in err
    for fragment in fragments:
        assert fragment in lines[0], err


# ---- settings -----------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("setting, field", [
    ("model.n_encoder_layers=-2", "model.n_encoder_layers"),  # trained a model without an encoder
    ("model.n_heads=0", "model.n_heads"),  # ZeroDivisionError
    ("train.label_smoothing=2", "train.label_smoothing"),  # traceback
    ("train.max_steps=-1", "train.max_steps"),  # trained one step
    ("train.lr=nan", "train.lr"),
    ("model.dropout=1", "model.dropout"),
    ("train.betas=(0.9,1.5)", "train.betas"),
    ("data.vocab_size=0", "data.vocab_size"),
    ("train.log_every_steps=0", "train.log_every_steps"),  # modulo by zero in the loop
    ("train.warmup_steps=0", "train.warmup_steps"),  # noam divides by it
    ("train.device=gpu", "train.device"),
    ("data.vocab_size=99999999999999999999", "data.vocab_size"),  # OverflowError in the BPE trainer
    ("train.final_test_splits=[test2016,nope]", "train.final_test_splits: dataset 'multi30k' has no split 'nope'"),
    ("data.valid_split=dev", "data.valid_split"),  # both were found only when the split was read
    ("train.lr=1e-300", "train.lr=1e-300 cannot be represented in float32"),  # 0 in float32: nothing learned
])
def test_invalid_settings_are_refused_naming_the_field(run, setting: str, field: str) -> None:
    assert_clean(*run("train", "--preset", "smoke", "--set", setting, "--print-config"), 2, field)


def test_finalize_refuses_settings_that_the_trained_weights_cannot_follow(run, tmp_path) -> None:
    from vaswani.training.presets import load_preset

    (tmp_path / "config.yaml").write_text(load_preset("smoke").to_yaml())
    assert_clean(*run("finalize", "--run-dir", tmp_path, "--set", "model.d_model=8"), 2,
                 "'model.d_model=8'", "section train")  # was silently ignored


@pytest.mark.parametrize("content, fragment", [
    (b"model: tiny\n", "section model must be a mapping"),  # AttributeError/ValueError
    (b"train: [1, 2]\n", "section train must be a mapping"),
    (b"- model\n- data\n", "expected sections model, data, train"),
    (b"model: {preset: tiny}\ntrain: {max_steps: \xff\xfe}\n", "not UTF-8"),  # UnicodeDecodeError
    (b"model: {preset: tiny, colour: blue}\n", "colour"),  # TypeError from the preset
    (b"model: {preset: tiny}\ndata: {vocab_size: 100}\n", "data.vocab_size"),
    (b"model: {preset: tiny\n", "invalid YAML"),
    (b"model: {preset: tiny}\ntrain:\n  max_steps: 5\n  max_steps: 50\n", "key 'max_steps' is given twice"),  # 50
])
def test_malformed_preset_files_are_refused(run, tmp_path, content: bytes, fragment: str) -> None:
    preset = tmp_path / "preset.yaml"
    preset.write_bytes(content)
    assert_clean(*run("train", "--preset", preset, "--print-config"), 2, str(preset), fragment)


def test_a_preset_path_naming_a_directory_is_refused(run, tmp_path) -> None:
    (tmp_path / "dir.yaml").mkdir()
    assert_clean(*run("train", "--preset", tmp_path / "dir.yaml", "--print-config"), 2, "is a directory")


# ---- run directories ---------------------------------------------------------------------------------------------

def fake_run(run_dir: Path, link: str | None) -> dict[str, bytes]:
    """A run directory as an earlier run left it; returns its files' contents to check nothing was touched."""
    (run_dir / "checkpoints").mkdir(parents=True)
    (run_dir / "config.yaml").write_text("model: {preset: tiny}\n")
    (run_dir / "metrics.jsonl").write_text('{"kind": "train", "step": 1, "loss": 9.0}\n')
    if link is not None:
        os.symlink(link, run_dir / "checkpoints" / "last")
    return {p.name: p.read_bytes() for p in run_dir.iterdir() if p.is_file()}


@pytest.mark.parametrize("link", [
    "step_0000009",  # dangling: its checkpoint was deleted (Path.exists() is False for it)
    "last",  # a loop
    None,  # the earlier run stopped before its first checkpoint
])
def test_a_run_directory_holding_a_run_is_never_overwritten(run, tmp_path, link: str | None) -> None:
    run_dir = tmp_path / "run"
    before = fake_run(run_dir, link)
    assert_clean(*run("train", "--preset", "smoke", "--run-dir", run_dir), 2, "already holds a run", "--resume")
    assert {p.name: p.read_bytes() for p in run_dir.iterdir() if p.is_file() and p.name != ".lock"} == before
    # nor resumed from nothing
    assert_clean(*run("train", "--preset", "smoke", "--run-dir", run_dir, "--resume"), 2, "nothing to resume")


def test_start_over_moves_the_earlier_run_aside_and_deletes_nothing(tmp_path) -> None:
    from vaswani.training.rundir import check_start, lock_run_directory, run_evidence

    run_dir = tmp_path / "run"
    before = fake_run(run_dir, "step_0000009")
    with lock_run_directory(run_dir):
        check_start(run_dir, resume=False, start_over=True)
    assert run_evidence(run_dir) == []
    aside = next(run_dir.glob("superseded-*"))
    assert {p.name: p.read_bytes() for p in aside.iterdir() if p.is_file()} == before
    assert os.readlink(aside / "checkpoints" / "last") == "step_0000009"


def test_a_second_trainer_on_the_same_directory_is_refused_with_the_holders_pid(run, tmp_path) -> None:
    from vaswani.training.rundir import lock_run_directory

    run_dir = tmp_path / "run"
    with lock_run_directory(run_dir):  # flock conflicts between two open files even inside one process
        assert_clean(*run("train", "--preset", "smoke", "--run-dir", run_dir), 2, "in use", f"pid {os.getpid()}")
    with lock_run_directory(run_dir):  # released when the holder is done
        pass


def test_an_unwritable_run_directory_is_refused_before_any_work(run, tmp_path) -> None:
    assert_clean(*run("train", "--preset", "smoke", "--run-dir", unwritable_directory(tmp_path)), 1,
                 "cannot be written")


# ---- checkpoints --------------------------------------------------------------------------------------------------

def test_truncated_weights_are_reported_not_raised(run, checkpoint: Path, source_file: Path, tmp_path) -> None:
    weights = checkpoint / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:5000])
    assert_clean(*run("translate", "--checkpoint", checkpoint, "--input", source_file, "--device", "cpu"), 2,
                 "model.safetensors", "truncated or corrupt")
    other = Path(shutil.copytree(checkpoint, tmp_path / "other"))
    assert_clean(*run("average", "--checkpoints", checkpoint, other, "--out", tmp_path / "avg"), 2,
                 "truncated or corrupt")


@pytest.mark.parametrize("change", [
    {"d_ff": 256},  # other shapes
    {"positions": "learned"}, {"tie_embeddings": "none"},  # other tensors
    {"n_heads": 2}, {"activation": "gelu"}, {"norm": "pre"},  # the same shapes: loaded and translated differently
])
def test_a_model_json_the_weights_were_not_written_for_is_named_with_both_files(run, checkpoint: Path,
                                                                                 source_file: Path,
                                                                                 change: dict) -> None:
    config = json.loads((checkpoint / "model.json").read_text())
    (checkpoint / "model.json").write_text(json.dumps({**config, **change}))
    (key, value), = change.items()
    assert_clean(*run("translate", "--checkpoint", checkpoint, "--input", source_file, "--device", "cpu"), 2,
                 f"{checkpoint / 'model.json'} does not match {checkpoint / 'model.safetensors'}: "
                 f"{key}={value!r} (weights: {config[key]!r})", "restore the checkpoint's own model.json")


def test_a_tokenizer_from_another_checkpoint_is_named_with_the_weights(run, checkpoint: Path, source_file: Path,
                                                                      data_dir: Path) -> None:
    from vaswani.data.corpora import load_corpus
    from vaswani.data.tokenizer import Tokenizer

    train = load_corpus("multi30k", "train", data_dir=data_dir)
    other = Tokenizer.train(train.source[500:1000] + train.target[500:1000], vocab_size=1000)
    assert other.vocab_size == Tokenizer.load(checkpoint / "tokenizer.json").vocab_size  # same size, other words
    other.save(checkpoint / "tokenizer.json")
    assert_clean(*run("translate", "--checkpoint", checkpoint, "--input", source_file, "--device", "cpu"), 2,
                 f"{checkpoint / 'tokenizer.json'} does not match {checkpoint / 'model.safetensors'}",
                 "put back the checkpoint's own tokenizer.json")


def strip_fingerprint(checkpoint: Path) -> None:
    """Weights as another tool writes them: no vaswani metadata, and no manifest beside them."""
    from safetensors.torch import load_file, save_file

    save_file(load_file(checkpoint / "model.safetensors"), checkpoint / "model.safetensors")
    (checkpoint / "vaswani.json").unlink()


@pytest.mark.parametrize("change, fragment", [
    ({"d_ff": 256}, "model.safetensors: weights do not match model.json (size mismatch"),
    ({"positions": "learned"}, "model.safetensors: weights do not match model.json (missing ['"),
])
def test_weights_without_a_fingerprint_that_do_not_fit_model_json_are_named(run, checkpoint: Path, source_file: Path,
                                                                            change: dict, fragment: str) -> None:
    strip_fingerprint(checkpoint)
    code, err = run("translate", "--checkpoint", checkpoint, "--input", source_file, "--device", "cpu", "--beam", "1")
    assert code == 0, err  # loaded unchecked, as it was written
    config = json.loads((checkpoint / "model.json").read_text())
    (checkpoint / "model.json").write_text(json.dumps({**config, **change}))
    assert_clean(*run("translate", "--checkpoint", checkpoint, "--input", source_file, "--device", "cpu"), 2, fragment)


def test_an_invalid_model_json_is_reported_with_its_file(run, checkpoint: Path, source_file: Path) -> None:
    config = json.loads((checkpoint / "model.json").read_text())
    (checkpoint / "model.json").write_text(json.dumps({**config, "n_heads": 0}))
    assert_clean(*run("translate", "--checkpoint", checkpoint, "--input", source_file, "--device", "cpu"), 2,
                 "model.json", "model.n_heads")


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
@pytest.mark.parametrize("command", ["translate", "evaluate"])
def test_asking_for_cuda_without_one_names_the_device(run, checkpoint: Path, source_file: Path,
                                                      command: str) -> None:
    data = ["--input", source_file] if command == "translate" else ["--src", source_file, "--ref", source_file]
    assert_clean(*run(command, "--checkpoint", checkpoint, *data, "--device", "cuda"), 1, "'cuda'",
                 "no CUDA device")


# ---- outputs that replace a directory -------------------------------------------------------------------------------

def test_export_force_never_replaces_the_current_directory_or_the_checkpoint(run, checkpoint: Path, tmp_path,
                                                                            monkeypatch) -> None:
    work = tmp_path / "work"
    work.mkdir()
    (work / "precious.txt").write_text("keep me")
    monkeypatch.chdir(work)
    assert_clean(*run("export", "--checkpoint", checkpoint, "--format", "hf", "--out", ".", "--force"), 2,
                 "--out . holds the current directory", "pick a new directory")
    parent = tmp_path / "parent"
    inside = Path(shutil.copytree(checkpoint, parent / "run" / "final"))
    assert_clean(*run("export", "--checkpoint", inside, "--format", "hf", "--out", parent, "--force"), 2,
                 f"holds {inside}")
    assert (work / "precious.txt").read_text() == "keep me" and (inside / "model.safetensors").is_file()


def test_average_refuses_a_non_empty_out_and_with_force_replaces_it_whole(run, checkpoint: Path,
                                                                          tmp_path) -> None:
    other = Path(shutil.copytree(checkpoint, tmp_path / "other"))
    trained = Path(shutil.copytree(checkpoint, tmp_path / "trained"))  # a checkpoint average did not write
    assert_clean(*run("average", "--checkpoints", checkpoint, other, "--out", trained, "--force"), 2,
                 "is a checkpoint written by another command", "pick a new directory")
    old = tmp_path / "old"
    assert run("average", "--checkpoints", checkpoint, other, "--out", old)[0] == 0
    (old / "trainer_state.pt").write_bytes(b"a file of the earlier average's folder")
    assert_clean(*run("average", "--checkpoints", checkpoint, other, "--out", old), 2,
                 "holds an earlier checkpoint of `vaswani average`; pass --force")
    assert (old / "trainer_state.pt").is_file()
    code, err = run("average", "--checkpoints", checkpoint, other, "--out", old, "--force")
    assert code == 0, err
    assert sorted(p.name for p in old.iterdir()) == sorted(
        ["model.json", "model.safetensors", "tokenizer.json", "average.json", "vaswani.json"])
    # nothing of the replaced directory is left to mix with the new checkpoint, whose manifest lists its own files
    assert sorted(json.loads((old / "vaswani.json").read_text())["files"]) == sorted(
        ["model.json", "model.safetensors", "tokenizer.json", "average.json"])
    assert old.stat().st_mode & 0o777 == 0o777 & ~current_umask()  # as a plainly made directory, not mkdtemp's 0700
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".old.")]
    assert_clean(*run("average", "--checkpoints", checkpoint, other, "--out", tmp_path, "--force"), 2,
                 f"holds {checkpoint}")


def test_a_directory_written_whole_keeps_the_old_one_when_the_writer_fails(tmp_path) -> None:
    from vaswani.io import directory_written_whole

    out = tmp_path / "out"
    out.mkdir()
    (out / "old.txt").write_text("old")
    with pytest.raises(RuntimeError):
        with directory_written_whole(out) as staging:
            (staging / "half.txt").write_text("half")
            raise RuntimeError("killed mid-write")
    assert [p.name for p in tmp_path.iterdir()] == ["out"] and (out / "old.txt").read_text() == "old"
    with directory_written_whole(out) as staging:
        (staging / "new.txt").write_text("new")
    assert [p.name for p in tmp_path.iterdir()] == ["out"] and [p.name for p in out.iterdir()] == ["new.txt"]


# ---- translate / evaluate options and paths ------------------------------------------------------------------------

@pytest.mark.parametrize("options, fragment", [
    (["--beam", "0"], "--beam 0: search.beam_size=0 must be >= 1"),  # was reported as an --nbest problem
    (["--beam", "2", "--nbest", "3"], "--nbest 3"),
    (["--alpha", "nan"], "--alpha nan"),  # returned empty hypotheses scored -inf
    (["--max-tokens", "0"], "--max-tokens 0"),  # accepted
    (["--batch-size", "0"], "--batch-size 0"),
    (["--repetition-penalty", "0"], "--repetition-penalty 0"),
    (["--max-len-a", "1e9"], "search.max_len_a=1000000000.0 must be >= 0 and <= 16"),  # asked for 96 GB
    (["--max-len-a", "1e19"], "search.max_len_a=1e+19 must be >= 0 and <= 16"),  # empty translations, exit 0
    (["--max-len-b", "1000000000000"], "--max-len-b 1000000000000"),  # 80 TB
    (["--beam", "100000"], "--beam 100000"),
    (["--repetition-penalty", "1e-300"], "search.repetition_penalty=1e-300 must be >= 0.01 and <= 100"),  # -inf
    (["--alpha", "1e300"], "search.alpha=1e+300 must be >= 0 and <= 5"),  # an infinite length penalty
    (["--max-len-a", "0", "--max-len-b", "1"], "leave no room for a word"),  # every translation empty
    (["--max-len-a", "1e-300", "--max-len-b", "4"], "cannot be represented in float32"),
])
def test_invalid_search_options_name_the_option(run, source_file: Path, options: list[str], fragment: str) -> None:
    # checked before anything is loaded: the checkpoint does not even exist
    assert_clean(*run("translate", "--checkpoint", "missing", "--input", source_file, *options), 2, fragment)


def test_input_naming_a_directory_is_refused(run, checkpoint: Path, tmp_path) -> None:
    assert_clean(*run("translate", "--checkpoint", checkpoint, "--input", tmp_path, "--device", "cpu"), 2,
                 "is a directory")


def test_an_unwritable_output_is_refused_before_translating(run, source_file: Path, tmp_path) -> None:
    # the checkpoint does not exist: refusing the output first proves the check comes before the work
    out = unwritable_directory(tmp_path) / "out.en"
    assert_clean(*run("translate", "--checkpoint", "missing", "--input", source_file, "--output", out), 1,
                 "cannot be written")
    code, err = run("evaluate", "--checkpoint", "missing", "--src", source_file, "--ref", source_file,
                    "--out", unwritable_directory(tmp_path))
    assert_clean(code, err, 1, "cannot be written")


def test_translate_writes_its_output_whole(run, checkpoint: Path, source_file: Path, tmp_path) -> None:
    out = tmp_path / "new" / "out.en"
    code, err = run("translate", "--checkpoint", checkpoint, "--input", source_file, "--output", out,
                    "--device", "cpu", "--beam", "1")
    assert code == 0, err
    assert len(out.read_text(encoding="utf-8").splitlines()) == 2


# ---- standard streams, text that is not UTF-8, output paths ----------------------------------------------------------

def stdin_bytes(data: bytes) -> io.TextIOWrapper:
    """What Python makes of a pipe on stdin under a UTF-8 locale (bytes that are not UTF-8 become surrogates)."""
    return io.TextIOWrapper(io.BytesIO(data), encoding="utf-8", errors="surrogateescape")


def test_input_that_is_not_utf8_names_its_line_or_option(run, monkeypatch, tmp_path) -> None:
    # the checkpoint does not exist: each refusal comes before the model is loaded
    monkeypatch.setattr(sys, "stdin", stdin_bytes(b"Ein Mann.\nEin M\xe4nn.\n"))
    code, err = run("translate", "--checkpoint", "missing")
    assert_clean(code, err, 2)
    assert err == ("vaswani translate: error: standard input:2: invalid UTF-8 (byte(s) e4); the text must be UTF-8 "
                   "encoded\n")  # named here, before the tokenizer could fail on it with a TypeError
    bad = tmp_path / "bad.de"
    bad.write_bytes(b"Ein Mann.\nEin M\xe4nn.\n")
    assert_clean(*run("translate", "--checkpoint", "missing", "--input", bad), 2,
                 f"{bad}:2: invalid UTF-8 (byte(s) e4)")  # a line number, which an editor can go to
    # argv is decoded the same way: $'\xff' arrives as '\udcff'
    assert_clean(*run("classify", "predict", "--model", "missing", "--text", "\udcff"), 2,
                 "--text: invalid UTF-8 (byte(s) ff); the text must be UTF-8 encoded")


@pytest.mark.parametrize("closed, argv, message", [
    ("stdin", ["translate", "--checkpoint", "missing"], "standard input is closed; pass --input FILE"),
    ("stdout", ["translate", "--checkpoint", "missing", "--input", "IN"],
     "standard output is closed; pass --output FILE"),
    ("stdout", ["classify", "predict", "--model", "missing", "--csv", "IN"],
     "standard output is closed; pass --output FILE"),
    ("stdout", ["classify", "predict", "--model", "missing", "--text", "x"], "standard output is closed; label a CSV"),
])
def test_a_closed_standard_stream_is_refused_before_the_work(run, monkeypatch, source_file: Path, closed: str,
                                                             argv: list[str], message: str) -> None:
    monkeypatch.setattr(sys, closed, None)  # what Python makes of `<&-` or `>&-`
    code, err = run(*[source_file if a == "IN" else a for a in argv])
    assert_clean(code, err, 2, message)  # was AttributeError: 'NoneType' object has no attribute ...


@pytest.mark.parametrize("argv, option", [
    (["translate", "--checkpoint", "missing", "--input", "IN", "--output", "DIR"], "--output"),
    (["classify", "predict", "--model", "missing", "--csv", "IN", "--output", "DIR"], "--output"),
    (["bench", "decode", "--checkpoint", "missing", "--out", "DIR"], "--out"),
    (["bench", "decode", "--checkpoint", "missing", "--out", "DIR.json"], "--out"),  # DIR.md holds the table
    (["bench", "train", "--preset", "missing", "--out", "DIR"], "--out"),
])
def test_an_output_naming_a_directory_is_refused_before_the_work(run, source_file: Path, tmp_path, argv: list[str],
                                                                  option: str) -> None:
    # what each command would need first (model, preset) does not exist: the output is refused before it
    directory = tmp_path / "DIR"
    directory.mkdir()
    (tmp_path / "DIR.md").mkdir()
    argv = [source_file if a == "IN" else tmp_path / a if a.startswith("DIR") else a for a in argv]
    target = directory if argv[-1] == directory else tmp_path / "DIR.md"
    assert_clean(*run(*argv), 2, f"{option} {target}: is a directory; name a file")  # not .DIR.xxxx.tmp at the end
    assert sorted(p.name for p in tmp_path.iterdir()) == ["DIR", "DIR.md", "in.de"]


def test_a_device_as_output_is_refused_not_replaced(run, source_file: Path) -> None:
    assert_clean(*run("translate", "--checkpoint", "missing", "--input", source_file, "--output", "/dev/null"), 2,
                 "--output /dev/null: is not a regular file")
    assert Path("/dev/null").is_char_device()


def test_a_corrupt_registered_test_set_suggests_evaluates_own_options(run, tmp_path) -> None:
    (tmp_path / "multi30k").mkdir()
    for lang in ("de", "en"):
        (tmp_path / "multi30k" / f"test_2016_flickr.{lang}.gz").write_bytes(b"not the real file\n")
    code, err = run("evaluate", "--checkpoint", "missing", "--dataset", "multi30k", "--split", "test2016",
                    "--data-dir", tmp_path)
    assert_clean(code, err, 2, "test_2016_flickr.de.gz: sha256 is", "evaluate: --src/--ref")


# ---- compare, prepare ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("content", [
    '{"bleu": 30}',  # KeyError
    '[1, 2, 3]',  # TypeError
    '{"test_set": "x", "sentences": 1}',
    '"a string"',
    b"\xff\xfe\x00",  # not UTF-8
])
def test_compare_refuses_a_json_that_is_not_an_evaluate_result(run, tmp_path, content) -> None:
    path = tmp_path / "results.json"
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    assert_clean(*run("compare", path, "--out", tmp_path / "cmp"), 2, str(path))


@pytest.mark.parametrize("options, fragment", [
    (["--vocab-size", "0"], "vocab_size=0"),  # was silently the default
    (["--vocab-size", "100"], "vocab_size=100"),
    (["--max-len", "0"], "max_len=0"),  # refused only after the tokenizer was trained and written
    (["--min-frequency", "0"], "min_frequency=0"),
])
def test_prepare_refuses_bad_sizes_before_any_work(run, tmp_path, options: list[str], fragment: str) -> None:
    out = tmp_path / "prepared"
    assert_clean(*run("prepare", "--data-dir", tmp_path / "no-corpus-here", "--out", out, *options), 2, fragment)
    assert not out.exists()


# ---- numeric options ------------------------------------------------------------------------------------------------

# Checked after parsing, with their own messages, by the settings each command builds (tests above and in
# tests/classification, tests/serve): SearchConfig, ServeSettings, the classifier's TrainSettings and prepare's
# DataConfig. Every other numeric option declares its range where it is defined (vaswani.arguments.ranged).
CHECKED_BY_SETTINGS = {
    ("prepare", "--vocab-size"), ("prepare", "--max-len"), ("prepare", "--min-frequency"),
    ("translate", "--nbest"),
    *((command, option) for command in ("translate", "evaluate", "backtranslate", "distill") for option in (
        "--beam", "--alpha", "--max-len-a", "--max-len-b", "--repetition-penalty", "--no-repeat-ngram", "--batch-size",
        "--max-tokens")),
    *(("serve", option) for option in ("--max-chars", "--max-texts", "--max-body-bytes", "--max-queue", "--max-beam",
                                       "--max-request-tokens", "--batch-wait-ms", "--max-batch-sentences",
                                       "--max-batch-tokens")),
    *((f"classify {command}", option) for command in ("train", "experiment") for option in (
        "--val-fraction", "--vocab-size", "--min-frequency", "--max-len", "--epochs", "--batch-size", "--lr",
        "--warmup", "--weight-decay", "--clip", "--patience")),
}


def numeric_options() -> list[tuple[str, str, object]]:
    """(command, option, argparse type) of every option of every command that parses a number."""
    import argparse

    from vaswani.cli import build_parser

    found = []

    def walk(parser: argparse.ArgumentParser, command: str) -> None:
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    walk(sub, f"{command} {name}".strip())
            elif action.type in (int, float) or hasattr(action.type, "limit"):  # bare, or vaswani.arguments.ranged
                found.append((command, action.option_strings[0], action.type))

    walk(build_parser(), "")
    return found


def test_every_flag_the_errors_name_is_an_option_of_a_command() -> None:
    """The one table that turns a setting's field into a flag: each flag exists, under the name the rendering
    reads its value from, and every field of the server's settings has one (`vaswani serve` takes each)."""
    import argparse
    from dataclasses import fields

    from vaswani.cli import FLAGS, build_parser, command_flags, destination
    from vaswani.serve.settings import ServeSettings

    options: dict[str, set[str]] = {}

    def walk(parser: argparse.ArgumentParser) -> None:
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for sub in action.choices.values():
                    walk(sub)
            for option in action.option_strings:
                options.setdefault(option, set()).add(action.dest)

    walk(build_parser())
    for field, flag in FLAGS.items():
        assert options.get(flag) == {destination(flag)}, f"{field}: {flag} keeps its value in {options.get(flag)}"
    args = build_parser().parse_args(["serve", "--checkpoint", "x"])
    limits = {f"serve.{f.name}" for f in fields(ServeSettings) if f.name not in ("batching", "engine_options")}
    assert limits <= set(command_flags(args)), limits - set(command_flags(args))
    assert "search.beam_size" not in command_flags(args)  # serve has no --beam: a request sets the beam


def test_every_numeric_option_has_a_range() -> None:
    options = numeric_options()
    assert len(options) > 80  # the walk reached every subcommand
    unchecked = [(command, option) for command, option, kind in options
                 if kind in (int, float) and (command, option) not in CHECKED_BY_SETTINGS]
    assert not unchecked, f"declare a range with vaswani.arguments.ranged: {unchecked}"
    stale = CHECKED_BY_SETTINGS - {(command, option) for command, option, _ in options}
    assert not stale, stale


@pytest.mark.parametrize("argv, option", [
    (["bench", "train", "--steps", "0"], "--steps"),  # ZeroDivisionError
    (["bench", "train", "--repeats", "0"], "--repeats"),  # StatisticsError: no median for empty data
    (["bench", "train", "--warmup", "-1"], "--warmup"),  # silently ran
    (["bench", "train", "--max-tokens", "0"], "--max-tokens"),  # ValueError: max() arg is an empty sequence
    (["bench", "train", "--profile", "2", "0"], "--profile"),
    (["bench", "train", "--profile-passes", "two"], "--profile-passes"),
    (["bench", "decode", "--threads", "0"], "--threads"),
    (["bench", "decode", "--beams", "4", "-1"], "--beams"),
    (["experiment", "attention", "--dropout", "1"], "--dropout"),
    (["experiment", "memory", "--budget-gb", "nan"], "--budget-gb"),
    (["experiment", "devices", "--steps", "0"], "--steps"),
    (["experiment", "ablation", "--jobs", "0"], "--jobs"),
    (["experiment", "recipe", "--minutes", "-5"], "--minutes"),
    (["average", "--last", "0"], "--last"),
    (["serve", "--port", "70000"], "--port"),
    (["serve-bench", "--seconds", "inf"], "--seconds"),
    (["classify", "experiment", "--seeds", "0", "x"], "--seeds"),
])
def test_a_number_out_of_its_range_stops_at_parsing(run, argv: list[str], option: str) -> None:
    code, err = run(*argv)
    assert_clean(code, err, 2, f"argument {option}", "needs a")


# ---- bugs keep their traceback --------------------------------------------------------------------------------------

def test_a_real_bug_still_raises_and_debug_shows_every_traceback(run, monkeypatch, source_file: Path) -> None:
    import vaswani.decoding.commands as commands

    def bug(args):
        raise ZeroDivisionError("a bug")

    monkeypatch.setattr(commands, "translator_from_args", bug)
    with pytest.raises(ZeroDivisionError):
        main(["translate", "--checkpoint", "x", "--input", str(source_file)])
    with pytest.raises(VaswaniError):
        main(["--debug", "translate", "--checkpoint", "x", "--input", str(source_file), "--beam", "0"])
    monkeypatch.setenv("VASWANI_DEBUG", "1")
    with pytest.raises(VaswaniError):
        main(["translate", "--checkpoint", "x", "--input", str(source_file), "--beam", "0"])
