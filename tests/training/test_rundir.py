"""Checkpoints a kill can leave behind: a dangling `last`, a re-saved step, a torn metrics line."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from vaswani.config import ModelConfig
from vaswani.errors import VaswaniError
from vaswani.evaluation.checkpoint_info import CheckpointMeta
from vaswani.model import Transformer
from vaswani.training.checkpoint import (
    TrainerState,
    latest_checkpoint,
    load_trainer_state,
    point_link_at,
    save_checkpoint,
)
from vaswani.training.metrics import MetricsRecord, read_metrics


@pytest.fixture
def checkpoints(tmp_path) -> tuple[Path, Transformer, Path]:
    model = Transformer(ModelConfig.preset("tiny", vocab_size=300))
    tokenizer = tmp_path / "tokenizer.json"
    tokenizer.write_text("{}")
    return tmp_path / "checkpoints", model, tokenizer


def _state(step: int) -> TrainerState:
    return TrainerState(optimizer={}, scheduler={}, scaler={}, progress={"step": step}, rng={}, config_yaml="")


def _meta(step: int, reason: str = "periodic") -> CheckpointMeta:
    return CheckpointMeta(step=step, epoch=0, reason=reason, best_metric=None)


def test_resume_finds_the_newest_complete_checkpoint_when_last_dangles(checkpoints) -> None:
    directory, model, tokenizer = checkpoints
    for step in (2, 4):
        saved = save_checkpoint(directory, f"step_{step:07d}", model, tokenizer, _state(step), _meta(step))
        point_link_at(directory, "last", saved)
    (directory / "step_0000006").mkdir()  # a step the kill left without its files
    os.remove(directory / "last")
    os.symlink("step_0000009", directory / "last")  # dangling: Path.exists() is False
    assert latest_checkpoint(directory) == directory / "step_0000004"
    found, state = load_trainer_state(directory.parent)
    assert found == directory / "step_0000004" and state.progress["step"] == 4


def test_a_step_saved_twice_is_replaced_by_renames_and_never_half_deleted(checkpoints, monkeypatch) -> None:
    directory, model, tokenizer = checkpoints
    first = save_checkpoint(directory, "step_0000002", model, tokenizer, _state(2), _meta(2, "periodic"))
    point_link_at(directory, "last", first)

    # killed between the two renames: the old copy is aside under a name resume still finds
    real_replace = os.replace
    calls = []

    def replace_then_die(source, target):
        real_replace(source, target)
        if Path(source).name == "step_0000002":  # the old checkpoint moved aside, the new one not yet in place
            calls.append((Path(source).name, Path(target).name))
            raise KeyboardInterrupt  # stands in for SIGKILL between the two renames

    monkeypatch.setattr(os, "replace", replace_then_die)
    with pytest.raises(KeyboardInterrupt):
        save_checkpoint(directory, "step_0000002", model, tokenizer, _state(2), _meta(2, "eval"))
    monkeypatch.setattr(os, "replace", real_replace)
    assert calls == [("step_0000002", ".replaced-step_0000002")]
    assert latest_checkpoint(directory) == directory / ".replaced-step_0000002"
    # the save done again completes and removes the copy
    save_checkpoint(directory, "step_0000002", model, tokenizer, _state(2), _meta(2, "eval"))
    assert latest_checkpoint(directory) == directory / "step_0000002"
    assert not (directory / ".replaced-step_0000002").exists()


def test_a_torn_last_metrics_line_is_dropped_and_a_torn_middle_one_named(tmp_path) -> None:
    path = tmp_path / "metrics.jsonl"
    path.write_text('{"kind": "train", "step": 1}\n{"kind": "train", "st')
    assert read_metrics(path) == [MetricsRecord("train", 1)]
    path.write_text('{"kind": "train", "st\n{"kind": "train", "step": 2}\n')
    with pytest.raises(VaswaniError, match="metrics.jsonl:1"):
        read_metrics(path)
    path.write_text('{"kind": "train", "step": 1}\n\x89PNG\x1a garbage')  # not the start of a record: damage
    with pytest.raises(VaswaniError, match="metrics.jsonl:2: not a JSON record"):
        read_metrics(path)


def test_a_last_line_holding_two_records_is_damage_not_a_torn_record(tmp_path: Path) -> None:
    first, second = '{"kind": "train", "step": 1, "loss": 2.0}', '{"kind": "valid", "step": 1, "loss": 1.5}'
    log = tmp_path / "metrics.jsonl"
    log.write_text(f"{first}\n{second[:20]}")  # a kill while appending: the torn start is dropped
    assert [r.step for r in read_metrics(log)] == [1]
    log.write_text(f"{first[:-1]}{second}\n")  # a closing brace lost: two records on one line
    with pytest.raises(VaswaniError, match=f"{log}:1: not a JSON record"):
        read_metrics(log)


def test_truncating_the_metrics_log_keeps_every_field_of_the_records_it_keeps(tmp_path: Path) -> None:
    from vaswani.training.metrics import MetricsLog

    kept = '{"kind": "valid", "step": 2, "nll": 1.5, "example": {"source": "Ein Hund"}, "improved": true}'
    (tmp_path / "metrics.jsonl").write_text(f'{{"kind": "train", "step": 1, "loss": 2.0}}\n{kept}\n'
                                            '{"kind": "train", "step": 3, "loss": 1.0}\n')
    MetricsLog(tmp_path, tensorboard=False).truncate_after(2)
    assert (tmp_path / "metrics.jsonl").read_text().splitlines()[1] == kept
    assert [(r.kind, r.step, r.nll) for r in read_metrics(tmp_path / "metrics.jsonl")] == [("train", 1, None),
                                                                                          ("valid", 2, 1.5)]
