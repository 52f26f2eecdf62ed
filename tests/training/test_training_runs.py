"""Whole training runs of a tiny model on real Multi30k: the loss falls, a SIGKILLed run resumes
bit-exactly, Ctrl-C saves, non-finite losses are skipped, and 2 gloo ranks match one process."""

from __future__ import annotations

import dataclasses
import gzip
import json
import math
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import yaml
from safetensors.torch import load_file

from vaswani.errors import VaswaniError
from vaswani.evaluation.selection import Selection
from vaswani.training.presets import apply_settings, load_preset
from vaswani.training.schedule import noam_lr
from vaswani.training.summary import RunSummary, Stop

REPO = Path(__file__).resolve().parents[2]
TINY_RUN = [
    "train.max_epochs=null", "train.eval_every_steps=null", "train.bleu_subset=0", "train.precision=fp32",
    "train.progress=false", "train.patience=null", "train.log_every_steps=1", "train.max_tokens=600",
    "model.dropout=0.1", "data.vocab_size=400",
]


@pytest.fixture(scope="module")
def workdir(tmp_path_factory, data_dir: Path, prepared_multi30k) -> Path:
    """A working directory for the runs, with the data they prepare already there (shared by every run)."""
    root = tmp_path_factory.mktemp("train")
    (root / "data").symlink_to(data_dir)
    prepared_multi30k(root)
    return root


def _env(workdir: Path) -> dict[str, str]:
    return {**os.environ, "VASWANI_DATA": str(workdir / "data"), "VASWANI_CACHE": str(workdir / "cache"),
            "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}


def _train_command(run_dir: Path, *settings: str, resume: bool = False) -> list[str]:
    command = [sys.executable, "-m", "vaswani.cli", "train", "--preset", "smoke", "--run-dir", str(run_dir)]
    for setting in (*TINY_RUN, *settings):
        command += ["--set", setting]
    return command + (["--resume"] if resume else [])


def _weights(run_dir: Path) -> dict[str, torch.Tensor]:
    return load_file(run_dir / "checkpoints" / "last" / "model.safetensors")


def _run(command: list[str], workdir: Path) -> subprocess.CompletedProcess:
    result = subprocess.run(command, cwd=workdir, env=_env(workdir), capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    return result


def _main(command: list[str], workdir: Path, monkeypatch, capfd) -> tuple[int, str]:
    """The command run by `vaswani.cli.main` in this process, in ``workdir`` with the environment of ``_run``: what
    it checks is the command, not the process (which costs seconds to start). Returns (exit status, stderr)."""
    from vaswani.cli import main

    _in_process(workdir, monkeypatch)
    capfd.readouterr()
    code = main(command[command.index("vaswani.cli") + 1 :])
    return code, capfd.readouterr().err


@pytest.mark.parametrize("split", [0.0, 0.3], ids=["tokenizer-segmentation", "subword-split"])
def test_resume_after_sigkill_is_bit_exact(workdir: Path, split: float) -> None:
    steps = ["train.max_steps=14", "train.save_every_steps=2", f"data.subword_split={split}"]
    reference = workdir / f"uninterrupted-{split}"
    _run(_train_command(reference, *steps), workdir)

    interrupted = workdir / f"killed-{split}"
    process = subprocess.Popen(_train_command(interrupted, *steps), cwd=workdir, env=_env(workdir),
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 240
    last = interrupted / "checkpoints" / "last"
    # `last` moves only once a checkpoint is complete (a step_* directory may exist a moment before)
    while not (last.is_symlink() and os.readlink(last) >= "step_0000004"):
        assert process.poll() is None, process.stderr.read()[-3000:]
        assert time.time() < deadline, "no checkpoint appeared"
        time.sleep(0.02)
    assert process.poll() is None, "the run finished before it could be killed; the test proves nothing"
    process.send_signal(signal.SIGKILL)
    process.wait()
    killed_at = json.loads((interrupted / "checkpoints" / "last" / "meta.json").read_text())["step"]
    assert 4 <= killed_at < 14

    resumed = _run(_train_command(interrupted, *steps, resume=True), workdir)
    assert f"at step {killed_at}" in resumed.stderr
    expected, actual = _weights(reference), _weights(interrupted)
    assert expected.keys() == actual.keys()
    for name in expected:
        assert torch.equal(expected[name], actual[name]), f"{name} differs after resume"
    # the metrics log continues without duplicated steps
    train_steps = [r["step"] for r in map(json.loads, (interrupted / "metrics.jsonl").read_text().splitlines())
                   if r["kind"] == "train"]
    assert train_steps == list(range(1, 15))


@pytest.mark.parametrize("stop_signal", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_stop_signal_saves_a_checkpoint_and_resume_can_change_the_learning_rate(
        workdir: Path, stop_signal: signal.Signals, monkeypatch, capfd) -> None:
    """Ctrl-C and a scheduler's SIGTERM both end the update in flight, save, and exit 128 + the signal's number."""
    run_dir = workdir / f"interrupted-{stop_signal.name}"
    process = subprocess.Popen(_train_command(run_dir, "train.max_steps=400", "train.save_every_steps=3"),
                               cwd=workdir, env=_env(workdir), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True)
    deadline = time.time() + 240
    while not (run_dir / "checkpoints" / "step_0000003").exists():
        assert process.poll() is None and time.time() < deadline
        time.sleep(0.02)
    process.send_signal(stop_signal)
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == 128 + stop_signal.value, stderr[-2000:]
    assert f"interrupted by {stop_signal.name}: saved a checkpoint" in stderr
    meta = json.loads((run_dir / "checkpoints" / "last" / "meta.json").read_text())
    assert meta["reason"] == "interrupt" and meta["step"] >= 3
    last_lr = [r for r in map(json.loads, (run_dir / "metrics.jsonl").read_text().splitlines())
               if r["kind"] == "train"][-1]["lr"]

    code, stderr = _main(_train_command(run_dir, f"train.max_steps={meta['step'] + 2}", "train.lr_factor=1.0",
                                        resume=True), workdir, monkeypatch, capfd)
    assert code == 0, stderr[-3000:]
    assert "train.lr_factor changed 2.0 -> 1.0" in stderr
    records = [r for r in map(json.loads, (run_dir / "metrics.jsonl").read_text().splitlines()) if r["kind"] == "train"]
    first_resumed = next(r for r in records if r["step"] == meta["step"] + 1)
    # each record's lr is the one the next update uses: the new factor applies from the first resumed update
    assert last_lr == pytest.approx(noam_lr(meta["step"] + 1, 64, 10, factor=2.0))
    assert first_resumed["lr"] == pytest.approx(noam_lr(meta["step"] + 2, 64, 10, factor=1.0))


# `vaswani train` with every checkpoint write sending the process a stop signal: the first write (periodic, at
# update 3) the run's first signal, the write that signal starts (the interrupt's) a second one, and that write then
# takes SAVE_SECONDS longer. Deterministic: the signals come from inside the writes, not from a timer.
SIGNALS_DURING_SAVES = """
import os, signal, sys, time
import vaswani.training.signals as signals
import vaswani.training.trainer as trainer
from vaswani.cli import main

stop_signal, signals.SAVE_GRACE_SECONDS, save_seconds = int(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3])
write = trainer.save_checkpoint

def write_with_a_signal(checkpoints, name, model, tokenizer_file, state, meta):
    os.kill(os.getpid(), stop_signal)
    if meta.reason == "interrupt":
        time.sleep(save_seconds)
    return write(checkpoints, name, model, tokenizer_file, state, meta)

trainer.save_checkpoint = write_with_a_signal
sys.exit(main(sys.argv[4:]))
"""


def _signals_during_saves(workdir: Path, run_dir: Path, stop_signal: signal.Signals, grace: float,
                          save_seconds: float) -> subprocess.CompletedProcess:
    command = [sys.executable, "-c", SIGNALS_DURING_SAVES, str(stop_signal.value), str(grace), str(save_seconds),
               *_train_command(run_dir, "train.max_steps=400", "train.save_every_steps=3")[3:]]
    return subprocess.run(command, cwd=workdir, env=_env(workdir), capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("stop_signal", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_second_stop_signal_during_the_save_waits_for_it(workdir: Path, stop_signal: signal.Signals) -> None:
    """A scheduler that repeats its signal while the checkpoint is being written still gets the checkpoint, and
    the exit status of the first signal."""
    run_dir = workdir / f"second-{stop_signal.name}"
    result = _signals_during_saves(workdir, run_dir, stop_signal, grace=60, save_seconds=0.5)
    assert result.returncode == 128 + stop_signal.value, result.stderr[-2000:]
    assert f"interrupted by {stop_signal.name}: saved a checkpoint at step 3" in result.stderr
    meta = json.loads((run_dir / "checkpoints" / "last" / "meta.json").read_text())
    assert (meta["reason"], meta["step"]) == ("interrupt", 3)
    assert not list((run_dir / "checkpoints").glob(".*"))  # no staging or replaced directory left


def test_a_save_that_outlasts_the_grace_period_is_abandoned(workdir: Path) -> None:
    """The wait is bounded: a write still running SAVE_GRACE_SECONDS after the second signal is given up, and the
    checkpoints stay as they were."""
    run_dir = workdir / "grace-spent"
    started = time.monotonic()
    result = _signals_during_saves(workdir, run_dir, signal.SIGTERM, grace=0.5, save_seconds=120)
    assert time.monotonic() - started < 100  # the 120 s write was not waited for
    assert result.returncode == 130 and result.stderr.strip().splitlines()[-1] == "interrupted", result.stderr[-2000:]
    meta = json.loads((run_dir / "checkpoints" / "last" / "meta.json").read_text())
    assert (meta["reason"], meta["step"]) == ("periodic", 3)


def test_resume_keeps_the_runs_own_settings_and_records_what_set_changes(workdir: Path, monkeypatch, capfd) -> None:
    run_dir = workdir / "own-settings"
    assert _main(_train_command(run_dir, "train.max_steps=4", "train.max_tokens=500"), workdir, monkeypatch,
                 capfd)[0] == 0
    # resumed with the preset alone and one new setting: the run's --set values stay, only max_steps changes
    command = [sys.executable, "-m", "vaswani.cli", "train", "--preset", "smoke", "--run-dir", str(run_dir),
               "--resume", "--set", "train.max_steps=6"]
    code, stderr = _main(command, workdir, monkeypatch, capfd)
    assert code == 0, stderr[-3000:]
    assert "train.max_steps changed 4 -> 6" in stderr
    assert "max_tokens changed" not in stderr and "vocab_size" not in stderr
    assert RunSummary.read(run_dir).step == 6
    config = yaml.safe_load((run_dir / "config.yaml").read_text())
    assert config["train"]["max_tokens"] == 500 and config["data"]["vocab_size"] == 400
    starts = [json.loads(line) for line in (run_dir / "provenance.jsonl").read_text().splitlines()]
    assert [start["resumed"] for start in starts] == [False, True]
    assert starts[1]["changed_settings"] == {"train.max_steps": [4, 6]}
    assert "changed_settings" not in starts[0]


def test_a_resume_with_larger_batches_past_its_epochs_end_goes_on_with_the_next_epoch(workdir: Path, monkeypatch,
                                                                                      capfd) -> None:
    run_dir = workdir / "larger-batches"
    assert _main(_train_command(run_dir, "train.max_steps=4", "train.max_tokens=500"), workdir, monkeypatch,
                 capfd)[0] == 0
    # resumed at update 4 of an epoch that, at 700 batches an update, has fewer updates than that
    code, stderr = _main(_train_command(run_dir, "train.max_steps=5", "train.max_tokens=500", "train.grad_accum=700",
                                        resume=True), workdir, monkeypatch, capfd)
    assert code == 0, stderr[-3000:]
    summary = RunSummary.read(run_dir)
    assert (summary.step, summary.epoch) == (5, 1), stderr[-3000:]


def test_resume_refuses_a_changed_architecture_in_one_line(workdir: Path, monkeypatch, capfd) -> None:
    run_dir = workdir / "architecture"
    assert _main(_train_command(run_dir, "train.max_steps=2"), workdir, monkeypatch, capfd)[0] == 0
    code, stderr = _main(_train_command(run_dir, "train.max_steps=3", "model.d_ff=96", resume=True), workdir,
                         monkeypatch, capfd)
    assert code == 2  # the command line's fault, not the machine's
    assert stderr.strip().splitlines() == [
        "vaswani train: error: --resume cannot change the architecture (['d_ff']); start a new run directory instead"]


def test_updates_within_budget_follows_the_pace_and_never_passes_the_plan() -> None:
    from vaswani.training.callbacks import updates_within_budget

    assert updates_within_budget(100, 5000, seconds_left=60, updates_per_second=0.5) == 130
    assert updates_within_budget(100, 120, seconds_left=60, updates_per_second=0.5) == 120  # the plan ends first
    assert updates_within_budget(100, None, seconds_left=60, updates_per_second=2.0) == 220  # only a time limit
    assert updates_within_budget(100, 5000, seconds_left=-5, updates_per_second=2.0) == 100  # budget spent
    assert updates_within_budget(100, 5000, seconds_left=60, updates_per_second=None) == 5000  # no pace yet


def test_time_limited_run_sizes_its_progress_bar_to_the_clock(workdir: Path, monkeypatch, capfd) -> None:
    """A run that the clock ends long before max_steps must not show max_steps (and its ETA) in its progress
    (here the lines of a log: stderr is captured; a line after every update)."""
    monkeypatch.setenv("VASWANI_PROGRESS_SECONDS", "1e-9")
    code, stderr = _main(_train_command(workdir / "timed", "train.max_steps=100000", "train.max_minutes=0.05",
                                        "train.progress=true"), workdir, monkeypatch, capfd)
    assert code == 0, stderr[-3000:]
    assert "\r" not in stderr
    totals = [int(m.replace(",", "")) for m in re.findall(r"^training: [\d,]+/([\d,]+) steps ", stderr, re.M)]
    assert totals and totals[0] == 100000  # before any pace is known the bar shows the plan
    assert totals[-1] < 1000, stderr[-1000:]
    assert RunSummary.read(workdir / "timed").stop_reason is Stop.MAX_MINUTES


def test_nonfinite_losses_are_skipped_then_stop_the_run(workdir: Path, monkeypatch) -> None:
    from vaswani.training import loss as loss_module

    original = loss_module.TranslationLoss.forward
    calls = {"n": 0}

    def sometimes_nan(self, src, tgt_in, tgt_out):
        calls["n"] += 1
        loss_sum, nll, correct = original(self, src, tgt_in, tgt_out)
        if calls["n"] == 3 or calls["n"] >= 6:  # one isolated NaN, then NaN forever
            loss_sum = loss_sum * float("nan")
        return loss_sum, nll, correct

    monkeypatch.setattr(loss_module.TranslationLoss, "forward", sometimes_nan)
    monkeypatch.setenv("VASWANI_DATA", str(workdir / "data"))
    monkeypatch.setenv("VASWANI_CACHE", str(workdir / "cache"))
    monkeypatch.chdir(workdir)
    config = apply_settings(load_preset("smoke"), [*TINY_RUN, "train.max_steps=50", "train.save_every_steps=2",
                                                   "train.max_consecutive_nonfinite=3"])
    run_dir = workdir / "nan"
    trainer = settled_trainer(config, run_dir)
    with pytest.raises(VaswaniError, match="3 consecutive non-finite losses"):
        trainer.fit()
    assert trainer.progress.step == 4  # calls 1, 2, 4, 5 updated; 3 was skipped; 6, 7, 8 stopped the run
    assert trainer.progress.skipped_updates == 4
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert sum(r["kind"] == "nonfinite" for r in records) == 4
    last = run_dir / "checkpoints" / "last"
    assert json.loads((last / "meta.json").read_text())["step"] == 4
    assert all(torch.isfinite(t).all() for t in load_file(last / "model.safetensors").values())


def test_two_gloo_ranks_are_the_plain_loop_with_the_same_global_batch(workdir: Path, monkeypatch) -> None:
    """Two ranks each taking one micro-batch of an update compute, bit for bit, one process's update with two
    (dropout off: each rank draws its own masks)."""
    # On the CPU on purpose, also on a GPU machine: gloo between two CPU processes, whatever GPUs are visible.
    common = ["train.max_steps=4", "model.dropout=0.0", "train.save_every_steps=null", "train.device=cpu"]
    ddp = workdir / "ddp"
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port", "29517",
               "-m", "vaswani.cli"] + _train_command(ddp, *common)[3:]
    result = _run(command, workdir)
    summary = RunSummary.read(ddp)
    assert summary.world_size == 2 and summary.ranks_identical is True, result.stderr[-2000:]
    _in_process(workdir, monkeypatch)
    config = apply_settings(load_preset("smoke"), [*TINY_RUN, *common, "train.grad_accum=2"])
    plain = plain_training_from_the_docs()(config, updates=4).state_dict()
    for name, tensor in _weights(ddp).items():
        assert torch.equal(tensor, plain[name]), name


def test_loss_decreases_on_a_tiny_real_batch(data_dir: Path) -> None:
    from vaswani.config import ModelConfig
    from vaswani.data.batching import collate
    from vaswani.data.tokenizer import Tokenizer
    from vaswani.model import Transformer
    from vaswani.training.loss import translation_loss

    with gzip.open(data_dir / "multi30k" / "train.de.gz", "rt") as de, gzip.open(data_dir / "multi30k" / "train.en.gz",
                                                                                  "rt") as en:
        pairs = [(next(de).strip(), next(en).strip()) for _ in range(16)]
    tokenizer = Tokenizer.train([p for pair in pairs for p in pair], vocab_size=300, min_frequency=1)
    items = [(i, tokenizer.encode(s), tokenizer.encode(t)) for i, (s, t) in enumerate(pairs)]
    batch = collate(items)
    torch.manual_seed(0)
    model = Transformer(ModelConfig.preset("tiny", vocab_size=tokenizer.vocab_size, dropout=0.0))
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    losses = []
    for _ in range(40):
        out = translation_loss(model, batch.src, batch.tgt_in, batch.tgt_out, label_smoothing=0.0)
        loss = out.loss_sum / out.n_tokens
        losses.append(loss.item())
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    assert losses[0] == pytest.approx(math.log(tokenizer.vocab_size), rel=0.25)  # starts near uniform
    assert losses[-1] < 0.3 * losses[0], losses[::5]


# ---- the trainer with its GPU options, on a CPU ----------------------------------------------------------------
def _in_process(workdir: Path, monkeypatch) -> None:
    monkeypatch.setenv("VASWANI_DATA", str(workdir / "data"))
    monkeypatch.setenv("VASWANI_CACHE", str(workdir / "cache"))
    monkeypatch.chdir(workdir)


def settled_trainer(config, run_dir: Path, **options):
    """The Trainer of ``config`` settled with its data, as `vaswani train` builds it."""
    from vaswani.training.data import settle
    from vaswani.training.trainer import Trainer

    config, data = settle(config, run_dir)
    return Trainer(config, run_dir, data=data, **options)


def plain_training_from_the_docs():
    """The plain training loop docs/training.md shows ("The loop the Trainer runs"), run as it stands there."""
    page = REPO / "docs" / "training.md"
    section = page.read_text(encoding="utf-8").split("## The loop the Trainer runs", 1)[1]
    code = section.split("```python\n", 1)[1].split("```", 1)[0]
    namespace: dict = {}
    exec(compile(code, str(page), "exec"), namespace)
    return namespace["plain_training"]


# Bit-identity of the Trainer and the plain loop, on the CPU in fp32 (dropout on: the random numbers are drawn in
# the same order). Two gloo ranks are checked against the loop by test_two_gloo_ranks_are_the_plain_loop_....
@pytest.mark.parametrize("settings", [
    [],
    ["train.grad_accum=3"],  # three micro-batches per update, the loss normalised by all of their tokens
    ["train.host_sync=log-steps", "train.log_every_steps=2"],  # deferred host reads: the fused optimizer's skip flag
], ids=["one-batch-per-update", "grad-accum", "deferred-host-reads"])
def test_the_trainer_is_the_plain_training_loop(workdir: Path, monkeypatch, settings: list[str]) -> None:

    _in_process(workdir, monkeypatch)
    config = apply_settings(load_preset("smoke"), [*TINY_RUN, "train.max_steps=5", "train.device=cpu", *settings])
    trainer = settled_trainer(config, workdir / f"plain-{'-'.join(settings) or 'default'}")
    assert trainer.defer_reads == ("train.host_sync=log-steps" in settings)
    assert trainer.fit().step == 5
    model = plain_training_from_the_docs()(config, updates=5)
    for name, tensor in model.state_dict().items():
        assert torch.equal(trainer.model.state_dict()[name], tensor), name


def test_a_trainer_writes_nothing_until_it_fits_and_keeps_its_settled_config(workdir: Path, monkeypatch) -> None:
    from vaswani.training.data import settle
    from vaswani.training.trainer import Trainer

    _in_process(workdir, monkeypatch)
    run_dir = workdir / "written-by-fit"
    given = apply_settings(load_preset("smoke"), [*TINY_RUN, "train.max_steps=1"])
    config, data = settle(given, run_dir)
    # the config holds the vocabulary of the data's tokenizer, not the preset's
    assert given.model.vocab_size == 1000 and config.model.vocab_size == data.tokenizer.vocab_size != 1000
    settled = config.to_dict()
    trainer = Trainer(config, run_dir, data=data)
    assert not run_dir.exists()
    trainer.fit()
    assert trainer.config is config and config.to_dict() == settled
    # settled: nothing below the Trainer changes it
    for section, name in ((config, "train"), (config.train, "max_steps"), (config.model, "vocab_size"),
                          (config.data, "data_dir")):
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(section, name, getattr(section, name))
    assert {"config.yaml", "provenance.jsonl", "tokenizer.json", "metrics.jsonl", "checkpoints"} <= {
        path.name for path in run_dir.iterdir()}


def test_a_config_whose_vocabulary_is_not_the_datas_is_refused_in_one_line(workdir: Path, monkeypatch) -> None:
    from vaswani.errors import ConfigError
    from vaswani.training.data import settle
    from vaswani.training.trainer import Trainer

    _in_process(workdir, monkeypatch)
    run_dir = workdir / "other-vocabulary"
    config, data = settle(apply_settings(load_preset("smoke"), [*TINY_RUN, "train.max_steps=1"]), run_dir)
    preset = apply_settings(load_preset("smoke"), [*TINY_RUN, "train.max_steps=1"])  # the preset's 1000 tokens
    with pytest.raises(ConfigError) as error:
        Trainer(preset, run_dir, data=data)
    assert str(error.value) == (
        f"model.vocab_size=1000, model.pad_id=0: the run's data was prepared with a tokenizer of "
        f"{config.model.vocab_size} tokens and padding id {config.model.pad_id} ({data.prepared_tokenizer_file}); "
        "settle the config with its data (vaswani.training.data.settle)")
    assert error.value.field == "model.vocab_size" and not run_dir.exists()


def test_deferred_host_reads_train_the_same_weights_and_read_nothing_in_an_update(
        workdir: Path, monkeypatch, host_reads) -> None:
    """train.host_sync=log-steps, as on CUDA: the same weights as reading every update, and (with the loss over all
    positions, as on CUDA) not one host read of a value between the start and the end of an update."""
    from vaswani.training import device_choices
    from vaswani.training.callbacks import Callback

    class ReadsDuringUpdates(Callback):
        def __init__(self) -> None:
            self.reads: list[str] = []

        def on_update_start(self, trainer) -> None:
            self._mode = host_reads()
            self._mode.__enter__()

        def on_update_end(self, trainer, result) -> None:
            self._mode.__exit__(None, None, None)
            self.reads += self._mode.reads

    _in_process(workdir, monkeypatch)
    monkeypatch.setattr(device_choices, "loss_over_all_positions", lambda device, compiled: True)
    settings = [*TINY_RUN, "train.max_steps=6", "train.log_every_steps=3", "train.length_buckets=3", "train.device=cpu"]
    weights, reads = [], []
    for host_sync in ("every-update", "log-steps"):
        counter = ReadsDuringUpdates()
        trainer = settled_trainer(apply_settings(load_preset("smoke"), [*settings, f"train.host_sync={host_sync}"]),
                                  workdir / f"reads-{host_sync}", callbacks=[counter])
        summary = trainer.fit()
        assert summary.step == 6 and trainer.defer_reads == (host_sync == "log-steps")
        weights.append(trainer.model.state_dict())
        reads.append(counter.reads)
    for name, tensor in weights[0].items():
        assert torch.equal(weights[1][name], tensor), name
    assert reads[0] and reads[1] == []


def test_a_deferred_nonfinite_update_is_skipped_by_the_device_and_counted_when_read(
        workdir: Path, monkeypatch) -> None:
    from vaswani.training import loss as loss_module

    original = loss_module.TranslationLoss.forward
    calls = {"n": 0}

    def third_is_nan(self, src, tgt_in, tgt_out):
        calls["n"] += 1
        loss_sum, nll, correct = original(self, src, tgt_in, tgt_out)
        return (loss_sum * float("nan") if calls["n"] == 3 else loss_sum), nll, correct

    monkeypatch.setattr(loss_module.TranslationLoss, "forward", third_is_nan)
    _in_process(workdir, monkeypatch)
    config = apply_settings(load_preset("smoke"), [*TINY_RUN, "train.max_steps=5", "train.log_every_steps=4",
                                                   "train.host_sync=log-steps", "train.device=cpu"])
    run_dir = workdir / "deferred-nan"
    trainer = settled_trainer(config, run_dir)
    summary = trainer.fit()
    # every update counts (the host learns of the skip at the log step after it), one of them was skipped
    assert summary.step == 5 and summary.skipped_updates == 1 and trainer.progress.consecutive_nonfinite == 0
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records if r["kind"] == "nonfinite"] == [2]
    assert all(torch.isfinite(t).all() for t in trainer.model.state_dict().values())


def test_the_gpu_preset_runs_on_a_cpu_with_its_time_limits(workdir: Path, monkeypatch) -> None:
    """multi30k-gpu with its GPU settings turned into their CPU fallbacks and a tiny model: length buckets, the
    clock ending training, and the final model's choice cut short by train.final_max_minutes."""
    from vaswani.data.buckets import BucketSampler
    from vaswani.training.callbacks import Callback
    from vaswani.training.run import train

    preset = load_preset("multi30k-gpu")
    training = preset.train
    assert (training.length_buckets, training.cuda_graphs, training.host_sync, training.final_model) == (
        5, True, "auto", True)
    assert training.max_minutes + training.final_max_minutes <= 9  # the rest of 10 minutes: preparation and test scores
    assert training.decay_on_clock and training.schedule == "cosine"

    class Shapes(Callback):
        def on_update_start(self, trainer) -> None:
            self.sampler = trainer.data.sampler

    _in_process(workdir, monkeypatch)
    cpu = ["train.device=cpu", "train.cuda_graphs=false", "train.precision=fp32", "train.progress=false"]
    tiny = ["model.d_model=32", "model.n_heads=2", "model.d_ff=64", "model.n_encoder_layers=1",
            "model.n_decoder_layers=1", "data.vocab_size=400", "train.max_tokens=600", "train.bleu_subset=0",
            "train.eval_every_steps=3", "train.final_valid_sentences=12", "train.final_test_splits=",
            "train.max_minutes=0.02", "train.final_max_minutes=0.0001"]
    shapes = Shapes()
    summary = train(apply_settings(preset, [*cpu, *tiny]), workdir / "gpu-preset", callbacks=[shapes])
    assert isinstance(shapes.sampler, BucketSampler) and len(shapes.sampler.shapes()) == 5
    assert summary.stop_reason is Stop.MAX_MINUTES and summary.final is not None
    selection = Selection.read(workdir / "gpu-preset" / "checkpoints" / "final")
    assert selection.cut_short_by_time is True
    assert len(selection.searches) == 1  # greedy, scored before the limit was looked at; no beam after it
