"""The results.json of `vaswani bench decode --peer` reads back through vaswani.records, every field checked."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from vaswani.benchmarks.decode_peers_report import PeersReport
from vaswani.benchmarks.profiling import PROFILE_PASSES
from vaswani.errors import VaswaniError
from vaswani.records import to_json

RESULTS = Path(__file__).parents[2] / "results" / "export"


@pytest.mark.parametrize("path", ["results.json", "fixed-shape/results.json"])
def test_published_results_read_back_as_they_are(path: str) -> None:
    """The published results.json files read back whole: written again, they hold the same JSON."""
    file = RESULTS / path
    written = json.loads(file.read_text())
    assert to_json(PeersReport.read(file)) == {"profile_passes": PROFILE_PASSES, **written}


def test_a_damaged_results_file_names_its_field(tmp_path: Path) -> None:
    written = json.loads((RESULTS / "results.json").read_text())
    written["results"][1]["tokens"] = "many"
    (tmp_path / "results.json").write_text(json.dumps(written))
    with pytest.raises(VaswaniError, match=r'results.json: field "results\[1\].tokens" is "many", not a whole'):
        PeersReport.read(tmp_path / "results.json")
