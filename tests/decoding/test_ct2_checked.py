"""A CTranslate2 start-up skips hashing the checkpoint and its conversion when the record of their last full check
still matches every file, and checks in full again when any file changed, was damaged or replaced."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

pytest.importorskip("ctranslate2", reason="the CTranslate2 engine needs ctranslate2: pip install 'vaswani[export]'")

import vaswani.model.serialization as serialization  # noqa: E402
from vaswani.decoding import EngineOptions, SearchConfig, Translator, ct2_checked  # noqa: E402
from vaswani.decoding.ct2_model import CONVERTED_DIRECTORY  # noqa: E402
from vaswani.errors import VaswaniError  # noqa: E402
from vaswani.io import write_manifest  # noqa: E402

SENTENCE = "Ein Mann fährt Fahrrad."


@pytest.fixture
def checkpoint(trained_checkpoint: Path, tmp_path: Path) -> Path:
    """A copy of the trained checkpoint with its manifest, as a training run leaves one."""
    copy = Path(shutil.copytree(trained_checkpoint, tmp_path / "checkpoint",
                                ignore=shutil.ignore_patterns(CONVERTED_DIRECTORY)))
    write_manifest(copy, serialization.CHECKPOINT_KIND)
    return copy


@pytest.fixture
def full_checks(monkeypatch) -> list[str]:
    """The loads that checked the checkpoint and its conversion in full (hashing them), counted; files settle at
    once."""
    monkeypatch.setattr(ct2_checked, "SETTLE_SECONDS", 0.0)
    calls: list[str] = []
    check = serialization.check_checkpoint
    monkeypatch.setattr(serialization, "check_checkpoint", lambda *a, **k: calls.append("full") or check(*a, **k))
    return calls


def translate(checkpoint: Path) -> str:
    options = EngineOptions(engine="ctranslate2", device="cpu", quantization="int8", threads=1)
    return Translator.load(checkpoint, SearchConfig(beam_size=2, length_norm="power"), options).translate([SENTENCE])[0]


def test_an_unchanged_checkpoint_is_not_hashed_again_and_a_changed_one_is(checkpoint: Path, full_checks) -> None:
    first = translate(checkpoint)  # converts: the fresh conversion is not recorded (written during the check)
    assert translate(checkpoint) == first  # checks in full and records it
    assert full_checks == ["full"] * 3  # the conversion loads the weights, checked once more
    records = list((checkpoint / CONVERTED_DIRECTORY).glob("checked-int8-*.json"))
    assert len(records) == 1
    recorded = json.loads(records[0].read_text())["files"]
    assert str(checkpoint / "model.safetensors") in recorded and any(p.endswith("model.bin") for p in recorded)

    full_checks.clear()
    assert translate(checkpoint) == first and full_checks == []  # nothing changed: nothing hashed

    weights = checkpoint / "model.safetensors"
    stamp = weights.stat()
    weights.write_bytes(weights.read_bytes())  # the same bytes, written again: checked in full, and found whole
    os.utime(weights, ns=(stamp.st_atime_ns, stamp.st_mtime_ns))  # its old time put back: the change time differs
    assert translate(checkpoint) == first and full_checks == ["full"]


def test_a_file_damaged_after_the_record_is_caught_by_the_full_check(checkpoint: Path, full_checks) -> None:
    translate(checkpoint)
    translate(checkpoint)
    full_checks.clear()
    translate(checkpoint)
    assert full_checks == []
    weights = checkpoint / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-1] ^= 0xFF  # same size, one byte changed
    weights.write_bytes(bytes(data))
    with pytest.raises(VaswaniError, match="model.safetensors"):
        translate(checkpoint)


def test_a_damaged_conversion_is_converted_again_though_a_record_named_it(checkpoint: Path, full_checks,
                                                                          capsys) -> None:
    first = translate(checkpoint)
    translate(checkpoint)
    [conversion] = [path for path in (checkpoint / CONVERTED_DIRECTORY).iterdir() if path.is_dir()]
    model = conversion / "model.bin"
    data = bytearray(model.read_bytes())
    data[len(data) // 2] ^= 0xFF
    model.write_bytes(bytes(data))
    full_checks.clear()
    assert translate(checkpoint) == first and full_checks == ["full"] * 2  # checked, then converted again
    assert "converting again" in capsys.readouterr().err


def test_files_changed_while_or_just_before_the_check_are_not_recorded(checkpoint: Path, tmp_path: Path,
                                                                      monkeypatch) -> None:
    translate(checkpoint)
    conversion = next(path for path in (checkpoint / CONVERTED_DIRECTORY).iterdir() if path.is_dir())
    root = tmp_path / "records"
    root.mkdir()
    names = ("model.safetensors", "model.json", "tokenizer.json")
    monkeypatch.setattr(ct2_checked, "SETTLE_SECONDS", 3600.0)  # every file is younger than an hour
    ct2_checked.record_check(root, checkpoint, "int8", conversion, names, started_ns=os.stat(checkpoint).st_mtime_ns)
    assert not list(root.iterdir())
    monkeypatch.setattr(ct2_checked, "SETTLE_SECONDS", 0.0)
    ct2_checked.record_check(root, checkpoint, "int8", conversion, names, started_ns=10**19)
    assert ct2_checked.checked_conversion([root], checkpoint, "int8", names) == conversion
    assert ct2_checked.checked_conversion([root], checkpoint, "float32", names) is None  # another quantization
    (checkpoint / "search.json").write_text("{}")  # a file the check did not read appears: not what was checked
    assert ct2_checked.checked_conversion([root], checkpoint, "int8", (*names, "search.json")) is None
    [record] = root.iterdir()
    record.write_text("[1, 2")  # a damaged record is no record
    assert ct2_checked.checked_conversion([root], checkpoint, "int8", names) is None
