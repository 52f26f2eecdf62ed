"""scripts/gpu-session.sh runs on a lent GPU, where every minute is scarce: here, on the CPU, every one of its steps
runs end to end with tiny settings (``--cpu all``), the GPU-sized commands parse with settings that exist, and its
parts refuse to start without what they need."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import tarfile
from pathlib import Path

import pytest

from vaswani.cli import build_parser
from vaswani.config import ModelConfig, apply_model_settings
from vaswani.provenance import git_state
from vaswani.training.config import apply_settings, load_preset

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "gpu-session.sh"
PARTS = ["tests", "bench", "train", "studies", "compiled"]  # most valuable first


def listed_steps(*options: str) -> list[tuple[str, int, str]]:
    """(part, time limit in seconds, command) of every step, as ``--list`` prints them."""
    result = subprocess.run(["bash", str(SCRIPT), *options, "--list"], capture_output=True, text=True, check=True)
    steps = []
    for line in result.stdout.splitlines():
        part, seconds, command = re.fullmatch(r"(\S+)\s+(\d+)s  (.+)", line).groups()
        steps.append((part, int(seconds), command))
    return steps


def vaswani_commands(*options: str) -> list[list[str]]:
    return [shlex.split(command)[1:] for _, _, command in listed_steps(*options) if command.startswith("vaswani ")]


def test_the_parts_come_most_valuable_first_and_each_fits_one_device_call() -> None:
    steps = listed_steps()
    assert list(dict.fromkeys(part for part, _, _ in steps)) == PARTS
    for part in PARTS:  # a device call runs at most 10 minutes: each part ends inside them
        assert sum(seconds for name, seconds, _ in steps if name == part) <= 570, part
    # 30 minutes of device time, a machine's start too: the parts through `train` fit one session, the rest wait
    # for the next
    first_session = PARTS[: PARTS.index("train") + 1]
    assert sum(seconds for name, seconds, _ in steps if name in first_session) <= 28 * 60
    commands = [" ".join(argv[:2]) for argv in vaswani_commands()]
    for expected in ("bench train", "bench decode", "experiment attention", "experiment memory",
                     "experiment devices", "train --preset", "experiment final-models"):
        assert any(command.startswith(expected) for command in commands), expected


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
        assert re.fullmatch(r"(model|data|train)\.\w+=\S+", setting), setting


@pytest.mark.slow
def test_every_step_runs_end_to_end_on_the_cpu(tmp_path: Path, data_dir: Path) -> None:
    """``--cpu all``: each step's real command, with tiny sizes, into a folder of its own; the results it packs
    name the checkout's commit (a GPU session's name the commit in gpu_data/COMMIT)."""
    env = {**os.environ, "OUT": str(tmp_path), "VASWANI_DATA": str(data_dir), "OMP_NUM_THREADS": "1"}
    result = subprocess.run(["bash", str(SCRIPT), "--cpu", "all"], env=env, capture_output=True, text=True,
                            timeout=900)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    assert "gpu-session: every step of tests bench train studies compiled ended well" in result.stdout
    ran = re.findall(r"^::: exit (\d+) after \d+ s \(limit \d+ s\): (\S+ \S+ \S+ \S+)", result.stdout, re.MULTILINE)
    assert len(ran) == len(listed_steps("--cpu")) - 1  # every step but the GPU-only run of the whole suite
    assert {status for status, _ in ran} == {"0"}
    assert (tmp_path / "tests-bench-train-studies-compiled.log").read_text() == result.stdout
    commit = git_state()["commit"]  # this checkout's, or VASWANI_GIT_COMMIT's where a GPU session set it
    with tarfile.open(tmp_path / "results-studies.tar.gz") as packed:
        names = packed.getnames()
        assert {"results/attention-cpu/table.md", "results/memory-cpu/results.json",
                "results/devices-cpu/results.json"} <= set(names)
        attention = json.load(packed.extractfile("results/attention-cpu/results.json"))
    assert attention["git"]["commit"] == commit and attention["command"].startswith("vaswani")
    with tarfile.open(tmp_path / "results-train.tar.gz") as packed:
        summary = json.load(packed.extractfile("runs/multi30k-cpu/summary.json"))
        assert "results/multi30k-cpu/table.md" in packed.getnames()
    assert summary["final"]["search"] and summary["step"] == 2
    with tarfile.open(tmp_path / "results-bench.tar.gz") as packed:
        assert {"results/bench/train-base-cpu.md", "results/bench/decode-small-cpu.json"} <= set(packed.getnames())
    assert not (REPO / "results" / "attention-cpu").exists()  # the repository is left untouched


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
    assert result.returncode == 2 and "usage:" in result.stderr and "tests bench train studies compiled" in result.stderr
