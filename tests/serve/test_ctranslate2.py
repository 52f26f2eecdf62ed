"""`vaswani serve` on the CTranslate2 engine: the answers are the engine's, /v1/model names it, and the page's
heatmap comes from CTranslate2's attention, or from the torch model when asked for."""

from __future__ import annotations

import shutil
from dataclasses import replace
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

pytest.importorskip("ctranslate2", reason="the CTranslate2 engine needs ctranslate2: pip install 'vaswani[export]'")

from vaswani.decoding import EngineOptions, SearchConfig, Translator  # noqa: E402
from vaswani.decoding.config import StoredSearch  # noqa: E402
from vaswani.serve import ServeSettings, create_app  # noqa: E402

SENTENCE = "Ein Mann fährt Fahrrad."
STORED = SearchConfig(beam_size=3, length_norm="power", alpha=1.0)
ON_CPU = replace(ServeSettings().engine_options, device="cpu")  # the server's engine choice, on the CPU


@pytest.fixture(scope="module")
def checkpoint(trained_checkpoint: Path, tmp_path_factory) -> Path:
    """The trained tiny model with a stored search both engines run, and int8 as its chosen quantization."""
    directory = Path(shutil.copytree(trained_checkpoint, tmp_path_factory.mktemp("served") / "checkpoint",
                                     ignore=shutil.ignore_patterns("ctranslate2")))
    StoredSearch.of(STORED, quantization="int8").write(directory)
    return directory


@pytest.fixture(scope="module")
def client(checkpoint: Path):
    with TestClient(create_app(checkpoint, ServeSettings(max_beam=4, engine_options=ON_CPU))) as test_client:
        yield test_client


def test_the_server_runs_the_engine_and_quantization_its_checkpoint_chose(client, checkpoint: Path,
                                                                          sentences: list[str]) -> None:
    info = client.get("/v1/model").json()
    assert (info["engine"], info["quantization"], info["device"]) == ("ctranslate2", "int8", "cpu")
    assert info["search"]["length_norm"] == "power" and info["parameters"] > 0 and info["config"]["d_model"] == 64
    expected = Translator.load(checkpoint, STORED,
                               options=EngineOptions(device="cpu", engine="ctranslate2", quantization="int8"))
    body = client.post("/v1/translate", json={"texts": sentences[:6]}).json()
    assert [t["text"] for t in body["translations"]] == expected.translate(sentences[:6])


def test_the_heatmap_is_ctranslate2s_or_the_torch_models_for_the_translation_shown(client, sentences) -> None:
    text = sentences[0]
    translated = client.post("/v1/translate", json={"text": text, "beam": 2}).json()["translation"]
    engine = client.post("/v1/attention", json={"text": text, "beam": 2}).json()
    every = client.post("/v1/attention", json={"text": text, "beam": 2, "attention_from": "torch"}).json()
    assert engine["translation"] == every["translation"] == translated
    assert (engine["attention_from"], engine["layer_numbers"], engine["heads"]) == ("ctranslate2", [2], 0)
    assert (every["attention_from"], every["layer_numbers"], every["heads"]) == ("torch", [1, 2], 4)
    rows, columns = len(engine["target_tokens"]), len(engine["source_tokens"])
    (matrix,) = engine["mean_over_heads"]
    assert len(matrix) == rows and all(len(row) == columns for row in matrix)
    assert all(sum(row) == pytest.approx(1.0, abs=1e-3) for row in matrix)
    # CTranslate2's average of the last layer's heads is the torch model's, computed on the same weights
    # (int8 here, so within quantization error).
    reference = every["mean_over_heads"][-1]
    assert max(abs(a - b) for r, q in zip(matrix, reference) for a, b in zip(r, q)) < 0.1


def test_serve_on_the_torch_engine_when_asked(checkpoint: Path) -> None:
    settings = ServeSettings(engine_options=replace(ON_CPU, engine="torch"))
    with TestClient(create_app(checkpoint, settings)) as torch_client:
        info = torch_client.get("/v1/model").json()
        assert (info["engine"], info["quantization"]) == ("torch", None)
        body = torch_client.post("/v1/attention", json={"text": SENTENCE}).json()
        assert body["attention_from"] == "torch" and body["heads"] == 4


def test_a_greedy_model_with_the_gnmt_penalty_serves_every_beam_on_ctranslate2(trained_checkpoint: Path,
                                                                               tmp_path: Path) -> None:
    """A greedy final model stores the default GNMT penalty, which CTranslate2 has no counterpart for in a beam: a
    request's beam runs with the power penalty of the same alpha, as the CTranslate2 engine computes it."""
    directory = Path(shutil.copytree(trained_checkpoint, tmp_path / "checkpoint",
                                     ignore=shutil.ignore_patterns("ctranslate2")))
    greedy = SearchConfig(beam_size=1, length_norm="gnmt", alpha=0.6)
    StoredSearch.of(greedy, engine="ctranslate2").write(directory)
    with TestClient(create_app(directory, ServeSettings(max_beam=4, engine_options=ON_CPU))) as served:
        assert served.get("/v1/model").json()["engine"] == "ctranslate2"
        answer = served.post("/v1/translate", json={"text": SENTENCE, "beam": 3})
        assert answer.status_code == 200, answer.json()
    power = Translator.load(directory, SearchConfig(beam_size=3, length_norm="power", alpha=0.6),
                            replace(ON_CPU, engine="ctranslate2"))
    assert answer.json()["translation"] == power.translate([SENTENCE])[0]


def test_constraints_on_a_ctranslate2_server_are_a_422_naming_them(client) -> None:
    answer = client.post("/v1/translate", json={"text": "Ein Mann fährt Fahrrad.", "constraints": [["bicycle"]]})
    assert answer.status_code == 422 and answer.json()["error"]["field"] == "constraints", answer.text
    assert "ctranslate2" in answer.json()["error"]["message"]
