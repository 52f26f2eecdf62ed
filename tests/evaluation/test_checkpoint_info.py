"""What a checkpoint says about itself: a step checkpoint its validation (meta.json), a final model how it was chosen
(selection.json); a damaged field is one line naming the file and the field."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from vaswani.errors import VaswaniError
from vaswani.evaluation.checkpoint_info import (
    META_FILE,
    CheckpointInfo,
    CheckpointMeta,
    ValidationResult,
    checkpoint_info,
)
from vaswani.evaluation.metrics import CorpusScores
from vaswani.evaluation.selection import SELECTION_FILE, Candidate, Quantization, SearchTried, Selection
from vaswani.evaluation.selection import TestSetScores as SetScores  # a Test* name would be collected by pytest
from vaswani.records import to_json, write_record

SCORES = CorpusScores(22.25, 50.0, "nrefs:1|tok:13a", "nrefs:1|nc:6", 0.98, 0.97, [60.0, 30.0, 20.0, 10.0], 98, 100)


def selection() -> Selection:
    return Selection(
        weights="average of last 2", search="beam 4, power 1", search_settings={"beam_size": 4, "alpha": 1.0},
        valid_split="val", valid_sentences=100, valid=SCORES, quantization=Quantization(None, reason="no ct2"),
        test={"multi30k-test2016": SetScores(30.5, 55.0, 1.01, "sig", "chrf sig", 1000)},
        candidates=[Candidate("average of last 2", ["step_0000010", "step_0000020"], SCORES)],
        searches=[SearchTried("beam 4, power 1", {"beam_size": 4, "alpha": 1.0}, SCORES)], cut_short_by_time=False,
        seconds=12.5)


@pytest.fixture
def run(tmp_path: Path) -> Path:
    run = tmp_path / "run"
    for name in ("step_0000010", "step_0000015", "final", "copied"):
        (run / "checkpoints" / name).mkdir(parents=True)
    validated = ValidationResult(loss=4.0, nll=3.75, accuracy=0.5, tokens=900, bleu=12.5, bleu_sentences=16)
    write_record(run / "checkpoints" / "step_0000010" / META_FILE, CheckpointMeta(10, 0, "best", 4.0, validated))
    write_record(run / "checkpoints" / "step_0000015" / META_FILE, CheckpointMeta(15, 0, "periodic", 4.0))
    selection().write(run / "checkpoints" / "final")
    return run


def test_each_checkpoint_reports_what_its_own_files_say(run: Path) -> None:
    step = checkpoint_info(run / "checkpoints" / "step_0000010")
    assert step == CheckpointInfo("run/step_0000010", step=10, val_bleu=12.5, val_loss=4.0,
                                  val_bleu_on="the first 16 sentences of the validation split, greedy")
    # a checkpoint the run did not validate knows its step, and no score (never another step's)
    assert checkpoint_info(run / "checkpoints" / "step_0000015") == CheckpointInfo("run/step_0000015", step=15)
    final = checkpoint_info(run / "checkpoints" / "final")
    assert (final.step, final.weights, final.val_bleu) == (None, "average of last 2", 22.25)
    assert final.val_bleu_on == "100 sentences of val, beam 4, power 1"
    assert checkpoint_info(run / "checkpoints" / "copied") == CheckpointInfo("run/copied")


def test_a_selection_reads_back_as_it_was_written(run: Path) -> None:
    assert Selection.read(run / "checkpoints" / "final") == selection()
    assert selection().headline().test["multi30k-test2016"].bleu == 30.5


@pytest.mark.parametrize("where, change, field", [
    ("final", lambda s: s["valid"].update(bleu="high"), '"valid.bleu" is "high", not a number'),
    ("final", lambda s: s["candidates"][0].pop("checkpoints"), 'no field "candidates[0].checkpoints"'),
    ("final", lambda s: s.update(cut_short_by_time=1), '"cut_short_by_time" is 1, not true or false'),
    ("step_0000010", lambda s: s["validation"].update(tokens=9.5), '"validation.tokens" is 9.5, not a whole number'),
    ("step_0000010", lambda s: s.update(step=None), '"step" is null, not a whole number'),
], ids=["score", "missing", "flag", "nested", "step"])
def test_a_damaged_field_is_one_line_naming_the_file_and_the_field(run: Path, where: str, change, field: str) -> None:
    path = run / "checkpoints" / where / (SELECTION_FILE if where == "final" else META_FILE)
    values = json.loads(path.read_text())
    change(values)
    path.write_text(json.dumps(values))
    with pytest.raises(VaswaniError) as error:
        checkpoint_info(path.parent)
    message = str(error.value)
    assert message.startswith(f"{path}: field ") or message.startswith(f"{path}: no field"), message
    assert field in message and "\n" not in message


def test_a_file_that_is_not_json_is_named(run: Path) -> None:
    path = run / "checkpoints" / "step_0000010" / META_FILE
    path.write_text("{not json")
    with pytest.raises(VaswaniError, match="not valid JSON") as error:
        checkpoint_info(path.parent)
    assert str(path) in str(error.value)


def test_a_result_is_plain_json() -> None:
    meta = to_json(CheckpointMeta(3, 0, "eval", None, ValidationResult(1.0, 1.0, 0.5, 10)))
    assert json.loads(json.dumps(meta)) == meta and meta["validation"]["bleu"] is None
