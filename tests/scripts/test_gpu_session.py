"""scripts/gpu-session.sh runs on a lent GPU, where every minute is scarce: its commands must parse, its settings
exist and its parts refuse to start without what they need — checked here, on the CPU."""

from __future__ import annotations

import re
import shlex
import subprocess
from pathlib import Path

import pytest

from vaswani.cli import build_parser
from vaswani.config import ModelConfig, apply_model_settings
from vaswani.training.config import apply_settings, load_preset

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "gpu-session.sh"


def vaswani_commands() -> list[list[str]]:
    """The argument lists of every ``vaswani …`` command the script runs (continuation lines joined)."""
    text = SCRIPT.read_text().replace("\\\n", " ")
    return [shlex.split(match)[1:] for match in re.findall(r"^\s*step \d+ (vaswani [^\n]+)", text, re.MULTILINE)]


def test_the_script_runs_every_part_it_promises() -> None:
    commands = [" ".join(argv[:2]) for argv in vaswani_commands()]
    for expected in ("bench train", "bench decode", "experiment attention", "experiment memory",
                     "experiment devices", "train --preset", "experiment final-models"):
        assert any(command.startswith(expected) for command in commands), expected


@pytest.mark.parametrize("argv", vaswani_commands(), ids=lambda argv: " ".join(argv[:2]))
def test_each_command_parses_and_its_settings_exist(argv: list[str]) -> None:
    args = build_parser().parse_args(argv)
    settings = [value for flag, value in zip(argv, argv[1:]) if flag == "--set"]
    if argv[0] == "train":
        apply_settings(load_preset(args.preset), settings)
    elif argv[0] == "bench":
        apply_model_settings(ModelConfig.preset(args.preset), settings)
    for setting in settings:
        assert re.fullmatch(r"(model|data|train)\.\w+=\S+", setting), setting


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
