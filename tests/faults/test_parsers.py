"""Every parser bounded: a whole number past Python's digit limit in any JSON or YAML file read is one line,
and YAML settings (a preset, a run's config.yaml) are read with the bounds of JSON plus a bound on what their
aliases expand to, so a few hundred bytes of nested aliases are refused at once."""

from __future__ import annotations

import json
import shutil
import sys
import time
from pathlib import Path

import pytest

from vaswani.errors import VaswaniError
from vaswani.io import MAX_NESTING, parse_yaml, read_yaml

HUGE = "9" * (sys.get_int_max_str_digits() + 1)

# "billion laughs": 352 bytes that expand to 9^9 (387 million) values through nested aliases
ALIAS_BOMB = "\n".join(
    ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    + [f"{name}: &{name} [{','.join([f'*{previous}'] * 9)}]"
       for previous, name in zip("abcdefgh", "bcdefghi")]
) + "\nmodel: *i\n"


def test_an_alias_bomb_preset_is_refused_in_one_line_at_once(run, assert_one_line, tmp_path) -> None:
    preset = tmp_path / "bomb.yaml"
    preset.write_text(ALIAS_BOMB)
    start = time.perf_counter()
    code, _, err = run("train", "--preset", preset, "--run-dir", tmp_path / "run")
    assert time.perf_counter() - start < 1.0
    assert_one_line(code, err, 2, str(preset), "expands to more than")
    assert not (tmp_path / "run").exists()


def test_an_alias_bomb_in_a_run_config_is_refused_in_one_line(run, assert_one_line, trained_run,
                                                              tmp_path) -> None:
    run_dir = Path(shutil.copytree(trained_run, tmp_path / "run", symlinks=True))
    (run_dir / "config.yaml").write_text(ALIAS_BOMB)
    start = time.perf_counter()
    code, _, err = run("finalize", "--run-dir", run_dir)
    assert time.perf_counter() - start < 1.0
    assert_one_line(code, err, 2, str(run_dir / "config.yaml"), "expands to more than")


@pytest.mark.parametrize("text, problem", [
    ("a: &a [*a]\n", "an alias to a value that contains it"),
    ("a: " + "[" * (MAX_NESTING + 1) + "]" * (MAX_NESTING + 1) + "\n",
     f"nested more than {MAX_NESTING} levels"),
    # each side within the bound, the alias nesting one inside the other past it
    ("a: &x " + "[" * 33 + "1" + "]" * 33 + "\nb: " + "[" * 33 + "*x" + "]" * 33 + "\n",
     f"nested more than {MAX_NESTING} levels"),
    (f"a: {HUGE}\n", f"more than {sys.get_int_max_str_digits():,} digits"),
    ("a: 1\na: 2\n", "key 'a' is given twice"),
    ("a: [\n", "invalid YAML"),
])
def test_yaml_past_a_bound_is_one_error_naming_the_file(tmp_path, text: str, problem: str) -> None:
    path = tmp_path / "settings.yaml"
    path.write_text(text)
    with pytest.raises(VaswaniError) as error:
        read_yaml(path, "preset")
    assert str(error.value).startswith(f"{path}: the preset ") and problem in str(error.value)
    assert "\n" not in str(error.value)


def test_yaml_within_the_bounds_reads_as_before() -> None:
    # shared values (aliases) are fine when what they expand to is small; anchors keep their meaning
    assert parse_yaml("a: &x [1, 2]\nb: *x\nc: {d: 3}\n", "s") == {"a": [1, 2], "b": [1, 2], "c": {"d": 3}}
    assert parse_yaml("", "s") is None


@pytest.mark.parametrize("where", ["preset", "config.yaml"])
def test_too_many_digits_in_yaml_settings_is_one_line(run, assert_one_line, trained_run, tmp_path,
                                                       where: str) -> None:
    if where == "preset":
        path = tmp_path / "big.yaml"
        path.write_text(f"train:\n  max_steps: {HUGE}\n")
        code, _, err = run("train", "--preset", path, "--run-dir", tmp_path / "run")
    else:
        run_dir = Path(shutil.copytree(trained_run, tmp_path / "run", symlinks=True))
        path = run_dir / "config.yaml"
        path.write_text(path.read_text().replace("max_steps: ", f"max_steps: {HUGE} #", 1))
        code, _, err = run("finalize", "--run-dir", run_dir)
    assert_one_line(code, err, 2, str(path), "digits")


def _with_huge_number(path: Path, field: str | None = None) -> None:
    values = json.loads(path.read_text())
    text = json.dumps({**values, field: 1}) if field else json.dumps(values)
    path.write_text(text.replace(f'"{field}": 1', f'"{field}": {HUGE}') if field else text)


def test_too_many_digits_in_model_json_is_one_line(run, assert_one_line, checkpoint: Path,
                                                    source_file: Path) -> None:
    _with_huge_number(checkpoint / "model.json", "d_model")
    code, _, err = run("translate", "--checkpoint", checkpoint, "--input", source_file, "--device", "cpu")
    assert_one_line(code, err, 2, str(checkpoint / "model.json"), "digits")


def test_too_many_digits_in_a_checkpoint_manifest_is_one_line(run, assert_one_line, checkpoint: Path,
                                                               source_file: Path) -> None:
    _with_huge_number(checkpoint / "vaswani.json", "extra")
    code, _, err = run("translate", "--checkpoint", checkpoint, "--input", source_file, "--device", "cpu")
    assert_one_line(code, err, 2, str(checkpoint / "vaswani.json"), "digits")


@pytest.mark.parametrize("name", ["metrics.jsonl", "corpus.json"])
def test_too_many_digits_in_a_run_record_is_one_line(run, assert_one_line, trained_run, train_args, tmp_path,
                                                     name: str) -> None:
    run_dir = Path(shutil.copytree(trained_run, tmp_path / "run", symlinks=True))
    path = run_dir / name
    if name == "metrics.jsonl":
        with open(path, "a") as handle:
            handle.write(f'{{"kind": "train", "step": {HUGE}}}\n{{"kind": "note", "step": 1}}\n')
    else:
        _with_huge_number(path, "extra")
    code, _, err = run(*train_args(run_dir, "--resume"))
    assert_one_line(code, err, 2, str(path))
