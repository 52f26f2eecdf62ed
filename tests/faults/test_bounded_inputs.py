"""Every input is bounded: a device that never ends (/dev/zero) and a file past the limit are refused by every
command that reads text, before a byte of it is in memory; and every whole-number option of every command has an
upper bound, so no count reaches an allocation unchecked. Each case: exit 2, one error line naming the input, no
output written."""

from __future__ import annotations

import argparse
import io
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from vaswani.cli import build_parser
from vaswani.data.files import MAX_CORPUS_FILE_BYTES
from vaswani.data.textfiles import MAX_TEXT_BYTES
from vaswani.io import MAX_DOCUMENT_BYTES

DEVICE = Path("/dev/zero")


def sparse_file(path: Path, size: int) -> Path:
    """``path``, ``size`` bytes long without taking disk space: nothing may read it."""
    with open(path, "wb") as handle:
        handle.truncate(size)
    return path


@pytest.fixture(scope="module")
def oversized(tmp_path_factory) -> Path:
    """One byte past the text limit."""
    return sparse_file(tmp_path_factory.mktemp("oversized") / "huge.txt", MAX_TEXT_BYTES + 1)


@pytest.fixture(scope="module")
def oversized_corpus(tmp_path_factory) -> Path:
    """One byte past what prepare streams from one corpus file."""
    return sparse_file(tmp_path_factory.mktemp("oversized-corpus") / "huge.txt", MAX_CORPUS_FILE_BYTES + 1)


@pytest.fixture(scope="module")
def oversized_json(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("oversized-json")
    sparse_file(folder / "results.json", MAX_DOCUMENT_BYTES + 1)
    return folder


# (command line with the text input at X, what the one error line says)
READERS = {
    "translate --input": lambda x, w: ["translate", "--checkpoint", w["checkpoint"], "--input", x, "--output",
                                       w["out"] / "out.en"],
    "evaluate --src": lambda x, w: ["evaluate", "--checkpoint", w["checkpoint"], "--src", x, "--ref", w["ref"],
                                    "--out", w["out"] / "eval"],
    "evaluate --ref": lambda x, w: ["evaluate", "--checkpoint", w["checkpoint"], "--src", w["ref"], "--ref", x,
                                    "--out", w["out"] / "eval"],
    # the languages named: a device's name has no language suffix, and the pair is checked before any file is read
    "prepare --src": lambda x, w: ["prepare", "--src", x, "--tgt", w["ref"], "--out", w["out"] / "prepared",
                                   "--vocab-size", "300", "--src-lang", "de", "--tgt-lang", "en"],
    "prepare --tsv": lambda x, w: ["prepare", "--tsv", x, "--out", w["out"] / "prepared", "--vocab-size", "300",
                                   "--src-lang", "de", "--tgt-lang", "en"],
    "classify train --csv": lambda x, w: ["classify", "train", "--csv", x, "--out", w["out"] / "classifier"],
    "classify predict --csv": lambda x, w: ["classify", "predict", "--model", w["classifier"], "--csv", x,
                                            "--output", w["out"] / "labels.csv"],
}


@pytest.fixture
def inputs(tmp_path, checkpoint: Path, classifier: Path, references: Path) -> dict[str, Path]:
    out = tmp_path / "outputs"
    out.mkdir()
    return {"checkpoint": checkpoint, "classifier": classifier, "ref": references, "out": out}


@pytest.mark.parametrize("kind", ["device", "oversized"])
@pytest.mark.parametrize("reader", READERS)
def test_a_device_or_an_oversized_file_is_refused_before_it_is_read(run, assert_one_line, inputs, oversized,
                                                                    oversized_corpus, reader: str,
                                                                    kind: str) -> None:
    # prepare streams a corpus, so its bound is another: far larger, and checked before the file is read as well
    source = DEVICE if kind == "device" else oversized_corpus if reader.startswith("prepare") else oversized
    code, _, err = run(*READERS[reader](source, inputs))
    line = assert_one_line(code, err, 2, str(source))
    assert ("not a regular file" in line or "not a file" in line) if kind == "device" else "more than" in line
    assert list(inputs["out"].iterdir()) == []  # nothing written


@pytest.mark.parametrize("reader", READERS)
def test_a_loop_of_links_as_an_input_is_one_line(run, assert_one_line, inputs, tmp_path, reader: str) -> None:
    loop = tmp_path / "loop.de"
    loop.symlink_to(loop.name)
    code, _, err = run(*READERS[reader](loop, inputs))
    assert_one_line(code, err, 2, "loop.de")
    assert list(inputs["out"].iterdir()) == []


@pytest.mark.parametrize("kind", ["device", "oversized"])
def test_standard_input_that_is_a_device_or_too_large_is_refused(run, assert_one_line, inputs, oversized,
                                                                 monkeypatch, kind: str) -> None:
    handle = open(DEVICE if kind == "device" else oversized, "rb")
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(handle))
    try:
        code, _, err = run("translate", "--checkpoint", inputs["checkpoint"], "--output", inputs["out"] / "out.en")
    finally:
        handle.close()
    line = assert_one_line(code, err, 2, "standard input")
    assert ("not a regular file" in line) if kind == "device" else "more than" in line
    assert list(inputs["out"].iterdir()) == []


def test_an_oversized_json_input_is_refused_before_it_is_parsed(run, assert_one_line, oversized_json, tmp_path) -> None:
    code, _, err = run("compare", oversized_json, "--out", tmp_path / "comparison")
    assert_one_line(code, err, 2, str(oversized_json / "results.json"), "more than")
    assert not (tmp_path / "comparison").exists()


def test_a_json_input_nested_past_the_bound_is_refused(run, assert_one_line, tmp_path) -> None:
    folder = tmp_path / "evaluation"
    folder.mkdir()
    (folder / "results.json").write_text("[" * 5000 + "]" * 5000)
    code, _, err = run("compare", folder, "--out", tmp_path / "comparison")
    assert_one_line(code, err, 2, str(folder / "results.json"), "nested more than")


def _options(parser: argparse.ArgumentParser, prefix: str = "") -> Iterator[tuple[str, argparse.Action]]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _options(sub, f"{prefix} {name}".strip())
        else:
            yield prefix, action


def test_every_whole_number_option_has_an_upper_bound() -> None:
    """A count without a bound reaches an allocation (CTranslate2's threads, a position table, a batch) before any
    check; a search option is bounded where the search declares it (SearchConfig.LIMITS)."""
    from vaswani.cli import FLAGS
    from vaswani.decoding.config import SearchConfig

    search = {flag: SearchConfig.LIMITS.get(name.removeprefix("search."))
              for name, flag in FLAGS.items() if name.startswith("search.")}
    unbounded = []
    for command, action in _options(build_parser()):
        kind = getattr(action.type, "kind", action.type)
        if kind is not int:
            continue
        limit = getattr(action.type, "limit", None)
        flag = action.option_strings[0] if action.option_strings else action.dest
        if limit is None and flag in search:
            limit = search[flag]
            if flag == "--nbest":  # at most the beam, which is bounded
                continue
        if limit is None or (limit.le, limit.lt) == (None, None):
            unbounded.append(f"{command} {flag}")
    assert unbounded == []


@pytest.mark.parametrize("argv", [
    ["translate", "--checkpoint", "x", "--threads", "99999999999"],
    ["classify", "train", "--csv", "x", "--max-len", "1000000000"],
    ["prepare", "--max-len", "1000000000"],
    ["translate", "--checkpoint", "x", "--batch-size", "1000000000000"],
], ids=["threads", "classifier-max-len", "prepare-max-len", "batch-size"])
def test_an_absurd_count_is_refused_while_the_arguments_are_parsed(run, argv: list[str]) -> None:
    code, _, err = run(*argv)
    assert code == 2 and "needs a whole number" in err and "Traceback" not in err, err
