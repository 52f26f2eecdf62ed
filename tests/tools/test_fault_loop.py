"""The fault loop in small: a tiny run killed with SIGKILL during an update, during a checkpoint write and during
an evaluation, resumed each time, ends bit-identical to an uninterrupted run, and every checkpoint left on disk
loads. (`python -m vaswani.tools.faults` runs the long version: 20 kills, results/reliability/.)"""

from __future__ import annotations

from pathlib import Path

from vaswani.tools.faults import fault_loop


def test_sigkill_anywhere_then_resume_is_bit_identical(tmp_path_factory, data_dir: Path, monkeypatch) -> None:
    workdir = tmp_path_factory.mktemp("faults")
    monkeypatch.setenv("VASWANI_DATA", str(data_dir))
    monkeypatch.setenv("VASWANI_CACHE", str(workdir / "cache"))
    result = fault_loop(workdir, kills=3, seed=0, max_steps=8, log=lambda message: None)

    assert result.kills_done == 3, result  # one aimed at each phase, none missed by a finished run
    assert [r.target for r in result.kills] == ["step", "checkpoint", "evaluation"]
    for record in result.kills:
        assert record.broken == [], record  # every step_* left on disk is complete and loads
    assert result.every_checkpoint_loaded
    assert result.metrics_hold_each_update_once
    assert result.tensors_compared > 0 and result.differing_tensors == []
    assert result.bit_identical
    # training processes never fork the caller's process: a CUDA context (or any other state) of the caller cannot
    # reach them
    assert result.process_start_method in ("forkserver", "spawn")


def test_a_training_process_that_fails_on_its_own_ends_the_loop_with_its_error_in_one_line(tmp_path, monkeypatch,
                                                                                          capsys) -> None:
    from vaswani.tools.faults import main

    empty = tmp_path / "no-corpora"
    empty.mkdir()
    monkeypatch.setenv("VASWANI_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("VASWANI_MIRROR", "http://127.0.0.1:9/")  # nothing listens there: the download fails at once
    code = main(["--kills", "1", "--workdir", str(tmp_path / "work"), "--out", str(tmp_path / "out"),
                 "--data-dir", str(empty)])

    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert code == 2
    assert error.startswith("error: a training process failed with exit status 1: ")
    assert "train.de" in error and "reference.log" in error  # the process's own message, and where its log is
    assert not (tmp_path / "out" / "results.json").exists()  # no result is written for a loop that did not run
