"""Helpers for the experiment tests: run `vaswani experiment ...` in-process and read what it wrote."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from vaswani.cli import main


def run_experiment(name: str, out: Path, *options: str, device: Any = "cpu") -> dict[str, Any]:
    """Run one experiment's CLI into ``out`` and check the files every experiment must write."""
    assert main(["experiment", name, "--out", str(out), "--device", str(device), *options]) == 0
    payload = json.loads((out / "results.json").read_text())
    for key in ("command", "commit", "dirty", "git", "hardware", "versions", "settings", "results"):
        assert key in payload, f"results.json lacks {key!r}"
    assert payload["command"].startswith(f"vaswani experiment {name}")
    assert payload["hardware"]["torch"] and payload["hardware"]["processor"]
    assert payload["versions"]["torch"] and payload["versions"]["matplotlib"]
    table = (out / "table.md").read_text()
    assert "Measured on" in table and payload["command"] in table
    assert list(out.glob("*.png")), "no plot written"
    return payload


@pytest.fixture()
def experiment():
    return run_experiment
