"""The container recipe (Dockerfile) stays a working `vaswani serve`: its command parses with the real command
line, it installs extras that exist, and it exposes and health-checks the port it serves on. (Building the image
needs docker and a network; this checks what can go stale without them.)"""

from __future__ import annotations

import json
import re
from pathlib import Path

import tomllib

from vaswani.cli import build_parser

ROOT = Path(__file__).resolve().parents[2]


def instructions() -> dict[str, list[str]]:
    """Each Dockerfile instruction's arguments (continued lines joined), by instruction."""
    text = re.sub(r"\\\n\s*", " ", (ROOT / "Dockerfile").read_text(encoding="utf-8"))
    found: dict[str, list[str]] = {}
    for line in text.splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            instruction, _, arguments = line.strip().partition(" ")
            found.setdefault(instruction.upper(), []).append(arguments.strip())
    return found


def test_the_container_runs_vaswani_serve_on_every_interface_at_its_exposed_port() -> None:
    found = instructions()
    command = json.loads(found["ENTRYPOINT"][-1]) + json.loads(found["CMD"][-1])
    assert command[:2] == ["vaswani", "serve"]
    args = build_parser("serve").parse_args(command[1:])
    assert args.host == "0.0.0.0" and args.checkpoint == "/model"
    assert found["EXPOSE"] == [str(args.port)]
    health = " ".join(found["HEALTHCHECK"])
    assert f"http://127.0.0.1:{args.port}/health" in health


def test_the_container_installs_the_serve_extra_and_the_engine() -> None:
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["optional-dependencies"]
    installs = [run for run in instructions()["RUN"] if '".[' in run]
    assert len(installs) == 1
    wanted = re.search(r'"\.\[([^\]]+)\]"', installs[0]).group(1).split(",")
    assert "serve" in wanted and all(extra in extras for extra in wanted), wanted
    assert any(dependency.startswith("ctranslate2") for extra in wanted for dependency in extras[extra])


def test_what_the_recipe_copies_is_sent_to_docker_and_nothing_else() -> None:
    rules = [line for line in (ROOT / ".dockerignore").read_text(encoding="utf-8").splitlines()
             if line and not line.startswith("#")]
    assert rules[0] == "*"  # runs, results and the git history stay out of the build context
    kept = {rule[1:].rstrip("/") for rule in rules if rule.startswith("!")}
    copied = {source.rstrip("/") for copy in instructions()["COPY"] for source in copy.split()[:-1]}
    assert copied and copied <= kept and all((ROOT / path).exists() for path in copied), (copied, kept)
