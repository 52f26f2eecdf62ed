"""scripts/gpu-session.sh runs on a lent GPU machine, where every minute is scarce: 15 minutes in all, the machine's
start included, at most 10 per call. Here, on the CPU, its parts fit their calls, its GPU-sized commands parse with
settings that exist, the first two parts run end to end with tiny settings and the GPU hidden, a failed training run
falls back to the eager one, and the parts refuse to start without what they need."""

from __future__ import annotations

import csv
import json
import os
import re
import shlex
import stat
import subprocess
import tarfile
from pathlib import Path

import pytest

from vaswani.cli import build_parser
from vaswani.config import ModelConfig, apply_model_settings
from vaswani.provenance import git_state
from vaswani.training.presets import apply_settings, load_preset

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "gpu-session.sh"
# Each part's device call, in seconds, most valuable first. A session's machine gives 15 minutes, its start (up to
# 2) included: its first call runs headline, its second bench, and the others wait for later sessions.
BUDGETS = {"headline": 8 * 60, "bench": 4 * 60, "suite": 5 * 60, "studies": 5.5 * 60, "compiled": 8 * 60}
HEADER = 15  # nvidia-smi and torch's version before the first step
PREPARATION = 45  # a training run's seconds besides its clock and its final model's: start, data, test scores


def listed_steps(*options: str) -> list[tuple[str, int, str, bool]]:
    """(part, time limit in seconds, command, whether it runs only after a failure) of every step, as ``--list``
    prints them."""
    result = subprocess.run(["bash", str(SCRIPT), *options, "--list"], capture_output=True, text=True, check=True)
    steps = []
    for line in result.stdout.splitlines():
        part, seconds, command = re.fullmatch(r"(\S+)\s+(\d+)s  (.+)", line).groups()
        command, fallback = (command.split("  # ")[0], True) if "  # only if" in command else (command, False)
        steps.append((part, int(seconds), command, fallback))
    return steps


def vaswani_commands(*options: str) -> list[list[str]]:
    return [shlex.split(command)[1:] for _, _, command, _ in listed_steps(*options) if command.startswith("vaswani ")]


def minutes_of(argv: list[str]) -> float:
    """The longest a `vaswani train` command may take by its settings: its clock, its final model's, and the rest."""
    args = build_parser().parse_args(argv)
    config = apply_settings(load_preset(args.preset), [v for f, v in zip(argv, argv[1:]) if f == "--set"]).train
    return config.max_minutes + config.final_max_minutes + PREPARATION / 60


def test_each_part_fits_its_device_call_and_the_first_two_fit_one_session() -> None:
    steps = listed_steps()
    assert list(dict.fromkeys(part for part, _, _, _ in steps)) == list(BUDGETS)
    for part, budget in BUDGETS.items():
        limits = [seconds for name, seconds, _, fallback in steps if name == part and not fallback]
        assert HEADER + sum(limits) <= budget <= 9.5 * 60, part
    # a fallback takes what is left of the time of the step before it
    for (_, before, _, _), (_, seconds, _, fallback) in zip(steps, steps[1:]):
        assert not fallback or seconds < before
    assert 2 * 60 + BUDGETS["headline"] + BUDGETS["bench"] <= 14 * 60  # start, two calls, a minute for transfers
    commands = [" ".join(argv[:2]) for argv in vaswani_commands()]
    for expected in ("bench train", "bench decode", "experiment attention", "experiment memory",
                     "experiment devices", "train --preset", "experiment final-models"):
        assert any(command.startswith(expected) for command in commands), expected


def test_the_first_part_brings_the_gpu_tests_and_the_preset_as_a_user_runs_it_within_its_limits() -> None:
    headline = [(seconds, command, fallback) for part, seconds, command, fallback in listed_steps()
                if part == "headline"]
    tests, run, fallback, table = headline
    assert re.search(r"pytest -v .*-m gpu .*tests/gpu$", tests[1]) and "slow" not in tests[1]
    assert shlex.split(run[1]) == ["vaswani", "train", "--preset", "multi30k-gpu", "--set", "train.progress=false",
                                   "--run-dir", "runs/multi30k-gpu"]
    assert minutes_of(shlex.split(run[1])[1:]) * 60 <= run[0]
    assert fallback[2] and "train.cuda_graphs=false" in fallback[1]
    assert minutes_of(shlex.split(fallback[1])[1:]) * 60 <= fallback[0]
    assert "final-models --runs runs/multi30k-gpu" in table[1]
    suite = next(command for part, _, command, _ in listed_steps() if part == "suite")
    assert "-m not gpu and not slow" in suite  # the slow tests run this script on the CPU


@pytest.mark.parametrize("argv", vaswani_commands() + vaswani_commands("--cpu"),
                         ids=[f"{i}-{' '.join(argv[:2])}" for i, argv in
                              enumerate(vaswani_commands() + vaswani_commands("--cpu"))])
def test_each_command_parses_and_its_settings_exist(argv: list[str]) -> None:
    args = build_parser().parse_args(argv)
    settings = [value for flag, value in zip(argv, argv[1:]) if flag == "--set"]
    if argv[0] == "train":
        apply_settings(load_preset(args.preset), settings)
    elif argv[0] == "bench" and getattr(args, "preset", None):
        apply_model_settings(ModelConfig.preset(args.preset), settings)
    for setting in settings:
        assert re.fullmatch(r"(model|data|train)\.\w+=\S*", setting), setting


def _fake_nvidia_smi(bin_dir: Path, seen: Path) -> None:
    """An nvidia-smi that samples a GPU 37 % busy every 0.1 s, and writes down the CUDA_VISIBLE_DEVICES it saw."""
    bin_dir.mkdir()
    fake = bin_dir / "nvidia-smi"
    fake.write_text("#!/bin/sh\n"
                    f"echo \"CUDA_VISIBLE_DEVICES=[${{CUDA_VISIBLE_DEVICES-unset}}]\" > {seen}\n"
                    "while true; do echo '2026/11/26 12:00:00.000, 37, 5, 1024, 100.00'; sleep 0.1; done\n")
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)


def _run(out: Path, data_dir: Path, *parts: str, path: str | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "OUT": str(out), "VASWANI_DATA": str(data_dir), "OMP_NUM_THREADS": "1",
           "CUDA_VISIBLE_DEVICES": "0", "PATH": path or os.environ["PATH"]}
    return subprocess.run(["bash", str(SCRIPT), "--cpu", *parts], env=env, capture_output=True, text=True,
                          timeout=600)


@pytest.mark.slow
def test_the_first_two_parts_run_end_to_end_on_the_cpu(tmp_path: Path, data_dir: Path) -> None:
    """``--cpu headline bench``: each step's real command with tiny sizes and the GPU hidden, each leaving its
    results in $OUT as it ends, the GPU sampled during the training run; the results name the checkout's commit
    (a GPU session's name the commit in gpu_data/COMMIT)."""
    out, seen = tmp_path / "out", tmp_path / "seen"
    _fake_nvidia_smi(tmp_path / "bin", seen)
    published = {path: path.stat().st_mtime_ns for path in (REPO / "results").rglob("*") if path.is_file()}
    result = _run(out, data_dir, "headline", "bench", path=f"{tmp_path / 'bin'}:{os.environ['PATH']}")
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    assert "gpu-session: every step of headline bench ended well" in result.stdout
    assert (out / "headline-bench.log").read_text() == result.stdout
    assert seen.read_text() == "CUDA_VISIBLE_DEVICES=[]\n"  # --cpu hid the GPU from every step
    ran = re.findall(r"^::: exit (\d+) after \d+ s \(limit \d+ s\): (.+)$", result.stdout, re.MULTILINE)
    steps = [(part, command) for part, _, command, fallback in listed_steps("--cpu")
             if part in ("headline", "bench") and not fallback]
    assert [status for status, _ in ran] == ["0"] * len(steps)
    assert [command.replace("python3 -m vaswani", "vaswani") for _, command in ran] == [c for _, c in steps]
    # each step's results were packed before the next step started
    for kept, next_step in (("multi30k-cpu-run", "experiment final-models"), ("results-multi30k-cpu", "bench train")):
        assert result.stdout.index(f"kept in {kept}.tar.gz") < result.stdout.index(f"-m vaswani {next_step}")
    assert "skipped" in (out / "gpu-tests-cpu.log").read_text()

    with open(out / "gpu-utilisation-multi30k-cpu.csv") as samples:
        rows = list(csv.reader(samples, skipinitialspace=True))
    assert rows[0][:2] == ["timestamp", "utilization.gpu [%]"] and len(rows) > 1
    assert all(row[1] == "37" for row in rows[1:])
    assert re.search(r"GPU utilisation, sampled every second: mean 37 %, at least 50 % in 0 % of \d+ samples",
                     result.stdout)

    with tarfile.open(out / "multi30k-cpu-run.tar.gz") as packed:
        summary = json.load(packed.extractfile("runs/multi30k-cpu/summary.json"))
        config = packed.extractfile("runs/multi30k-cpu/config.yaml").read().decode()
        assert "runs/multi30k-cpu/checkpoints/final/selection.json" in packed.getnames()
    assert summary["step"] == 2 and summary["final"]["search"] and summary["compilation"] is None  # eager on a CPU
    assert "max_minutes: 3" in config  # the preset's own clock
    with tarfile.open(out / "results-multi30k-cpu.tar.gz") as packed:
        table = json.load(packed.extractfile("results/multi30k-cpu/results.json"))
        assert "results/multi30k-cpu/table.md" in packed.getnames()
    assert table["git"]["commit"] == git_state().commit and table["command"].startswith("vaswani")
    with tarfile.open(out / "results-bench-train-cpu.tar.gz") as packed:
        assert {"results/bench/train-base-cpu.json", "results/bench/train-base-cpu.md"} == set(packed.getnames())
    with tarfile.open(out / "results-bench-decode-cpu.tar.gz") as packed:
        assert "results/bench/decode-small-cpu.json" in packed.getnames()
    # the repository's results are left untouched (the CPU run wrote into $OUT/work)
    assert {path: path.stat().st_mtime_ns for path in (REPO / "results").rglob("*") if path.is_file()} == published


def test_a_training_run_that_fails_at_once_falls_back_to_the_eager_run(tmp_path: Path) -> None:
    """A run with CUDA graphs that fails at once leaves its time to the same run without them, and the results
    table is made of the run that finished. A stand-in python3 plays the steps: the first training run fails, the
    eager one finishes (it writes its summary), every other step passes."""
    bin_dir, calls = tmp_path / "bin", tmp_path / "calls"
    bin_dir.mkdir()
    fake = bin_dir / "python3"
    fake.write_text("#!/bin/sh\n"
                    f"echo \"$*\" >> {calls}\n"
                    "case \"$*\" in\n"
                    "  *'--run-dir runs/multi30k-cpu-eager'*) mkdir -p runs/multi30k-cpu-eager && "
                    "echo '{}' > runs/multi30k-cpu-eager/summary.json ;;\n"
                    "  *'vaswani train'*) echo 'the CUDA graphs failed' >&2; exit 1 ;;\n"
                    "esac\n")
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    result = _run(tmp_path / "out", tmp_path, "headline", path=f"{bin_dir}:{os.environ['PATH']}")
    assert result.returncode == 1 and "gpu-session: 1 step(s) failed" in result.stdout, result.stdout
    ran = [line for line in calls.read_text().splitlines() if line.startswith("-m ")]  # not the version line
    assert [line.split(" --")[0] for line in ran] == ["-m pytest -v -rfEs", "-m vaswani train", "-m vaswani train",
                                                      "-m vaswani experiment final-models"]
    assert "train.cuda_graphs=false --set train.max_minutes=2" in ran[2] and ran[2].endswith("multi30k-cpu-eager")
    assert "--runs runs/multi30k-cpu-eager " in ran[3]
    with tarfile.open(tmp_path / "out" / "multi30k-cpu-eager-run.tar.gz") as packed:
        assert packed.getnames() == ["runs/multi30k-cpu-eager/summary.json"]


def _repository_with_the_script(root: Path) -> Path:
    (root / "scripts").mkdir(parents=True)
    (root / "scripts" / SCRIPT.name).write_text(SCRIPT.read_text())
    for command in (["init", "-q"], ["add", "."], ["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "x"]):
        subprocess.run(["git", *command], cwd=root, check=True)
    return root


def test_prepare_copies_the_data_and_the_commit_and_refuses_a_dirty_tree(tmp_path: Path) -> None:
    repo = _repository_with_the_script(tmp_path / "repo")
    corpora = tmp_path / "data"
    (corpora / "multi30k").mkdir(parents=True)
    (corpora / "multi30k" / "train.de.gz").write_bytes(b"x")
    env = {"PATH": "/usr/bin:/bin", "VASWANI_DATA": str(corpora)}
    prepare = ["bash", "scripts/gpu-session.sh", "prepare"]
    result = subprocess.run(prepare, cwd=repo, env=env, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True).stdout
    assert (repo / "gpu_data" / "COMMIT").read_text() == head
    assert (repo / "gpu_data" / "multi30k" / "train.de.gz").read_bytes() == b"x"
    (repo / "scripts" / SCRIPT.name).write_text(SCRIPT.read_text() + "# changed\n")
    result = subprocess.run(prepare, cwd=repo, env=env, capture_output=True, text=True)
    assert result.returncode == 1 and "uncommitted changes" in result.stderr


def test_a_part_refuses_to_start_without_the_prepared_data(tmp_path: Path) -> None:
    copy = _repository_with_the_script(tmp_path / "repo")
    result = subprocess.run(["bash", str(copy / "scripts" / SCRIPT.name), "bench"], capture_output=True, text=True)
    assert result.returncode == 1 and "run 'bash scripts/gpu-session.sh prepare'" in result.stderr
    result = subprocess.run(["bash", str(copy / "scripts" / SCRIPT.name), "everything"], capture_output=True,
                            text=True)
    assert result.returncode == 2 and "usage:" in result.stderr
    assert "(parts: headline bench suite studies compiled)" in result.stderr
