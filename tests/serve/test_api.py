"""The HTTP contract of `vaswani serve`: every field, every error status, in process through the ASGI app."""

from __future__ import annotations

import json
import logging
import shutil
from dataclasses import replace
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from vaswani.decoding import EngineOptions, SearchConfig, Translator
from vaswani.errors import ConfigError
from vaswani.serve import ServeSettings, create_app

SENTENCE = "Ein Mann fährt Fahrrad."
SHORT = dict(max_len_a=0.0, max_len_b=6)  # short outputs: fast tests
ON_CPU = replace(ServeSettings().engine_options, device="cpu")  # the server's engine choice, on the CPU


@pytest.fixture(scope="module")
def client(tiny_checkpoint):
    settings = ServeSettings(max_chars=200, max_texts=4, max_body_bytes=2000, max_beam=4, engine_options=ON_CPU)
    with TestClient(create_app(tiny_checkpoint, settings)) as test_client:
        yield test_client


@pytest.fixture(scope="module")
def reference(tiny_checkpoint) -> Translator:
    return Translator.load(tiny_checkpoint, SearchConfig(beam_size=2, nbest=2, **SHORT),
                           options=EngineOptions(device="cpu"))


def test_translate_one_text_equals_the_translator(client, reference) -> None:
    answer = client.post("/v1/translate", json={"text": SENTENCE, "beam": 2, "nbest": 2, **SHORT})
    assert answer.status_code == 200, answer.text
    body = answer.json()
    expected = reference.translate_nbest([SENTENCE])[0]
    assert body["translation"] == body["translations"][0]["text"] == expected[0].text
    nbest = body["translations"][0]["nbest"]
    assert [h["text"] for h in nbest] == [h.text for h in expected]
    assert [h["score"] for h in nbest] == pytest.approx([h.score for h in expected], abs=1e-5)
    assert nbest[0]["score"] >= nbest[1]["score"] and all(h["log_prob"] <= 0 and h["length"] >= 1 for h in nbest)
    assert body["model"] == client.get("/v1/model").json()["id"] and body["time_ms"] > 0


def test_translate_several_texts_keeps_their_order(client, reference, test_pairs) -> None:
    texts = test_pairs[0][:4]
    body = client.post("/v1/translate", json={"texts": texts, "beam": 2, **SHORT}).json()
    assert "translation" not in body
    assert [t["text"] for t in body["translations"]] == reference.translate(texts)
    assert all(len(t["nbest"]) == 1 for t in body["translations"])


def test_health_model_page_and_openapi(client) -> None:
    assert client.get("/health").json()["status"] == "ready"
    info = client.get("/v1/model").json()
    assert info["vocab_size"] == 1000 and info["config"]["d_model"] == 64 and info["parameters"] > 0
    assert info["limits"]["max_texts"] == 4 and "step" in info and "val_bleu" in info
    page = client.get("/")
    assert page.status_code == 200 and 'id="heatmap"' in page.text
    assert client.get("/static/app.js").status_code == 200
    assert "/v1/translate" in client.get("/openapi.json").json()["paths"]


def test_attention_has_one_row_per_target_token_and_rows_sum_to_one(client) -> None:
    answer = client.post("/v1/attention", json={"text": SENTENCE, "beam": 2, **SHORT})
    assert answer.status_code == 200, answer.text
    body = answer.json()
    rows, columns = len(body["target_tokens"]), len(body["source_tokens"])
    assert body["source_tokens"][-1] == body["target_tokens"][-1] == "</s>"
    assert "".join(body["source_tokens"][:-1]) == SENTENCE  # the subwords spell the sentence
    assert len(body["weights"]) == body["layers"] == 2 and len(body["weights"][0]) == body["heads"] == 4
    for layer, mean in zip(body["weights"], body["mean_over_heads"]):
        for head in layer:
            assert len(head) == rows and all(len(row) == columns for row in head)
            assert all(sum(row) == pytest.approx(1.0, abs=1e-3) for row in head)
        expected_mean = [sum(h[t][s] for h in layer) / len(layer) for t in range(rows) for s in range(columns)]
        assert [w for row in mean for w in row] == pytest.approx(expected_mean, abs=1e-3)
    translated = client.post("/v1/translate", json={"text": SENTENCE, "beam": 2, **SHORT}).json()
    assert body["translation"] == translated["translation"]  # the heatmap explains the translation shown


ERRORS = [
    # (raw body, status, field named in the error)
    ("{not json", 400, "body"),
    ('["a list"]', 422, "body"),
    ('{"text": 5}', 422, "text"),
    ('{"texts": "not a list"}', 422, "texts"),
    ('{"texts": ["a", 3]}', 422, "texts[1]"),
    ('{"text": "a", "colour": "red"}', 422, "colour"),
    ('{"text": "a", "beam": "4"}', 422, "beam"),
    ('{"text": "a", "beam": 0}', 422, "beam"),
    ('{"text": "a", "beam": 5}', 422, "beam"),  # over the server's max_beam
    ('{"text": "a", "beam": 1000}', 422, "beam"),  # over the search's own limit too: named, never a 500
    ('{"text": "a", "alpha": -1}', 422, "alpha"),
    ('{"text": "a", "max_len_b": 100000}', 422, "max_len_b"),
    ('{"text": "a", "beam": 2, "nbest": 3}', 422, "nbest"),
    ('{"text": "a", "texts": ["b"]}', 422, "text"),
    ("{}", 422, "text"),
    ('{"text": "   "}', 422, "text"),
    ('{"text": "' + "x" * 201 + '"}', 422, "text"),
    ('{"texts": []}', 422, "texts"),
    ('{"texts": ["a", "b", "c", "d", "e"]}', 422, "texts"),
    ('{"texts": ["a", ""]}', 422, "texts[1]"),
    ('{"texts": ["a", "Ein \\ud800"]}', 422, "texts[1]"),  # valid JSON, but no text: a 422, not a 500
    ('{"text": "\\udcff"}', 422, "text"),
    ('{"text": "' + "x" * 2100 + '"}', 413, "body"),  # over max_body_bytes: refused before parsing
]


@pytest.mark.parametrize("raw, status, field", ERRORS, ids=[f"{s}-{f}-{i}" for i, (_, s, f) in enumerate(ERRORS)])
def test_bad_requests_get_a_json_error_naming_the_field(client, raw: str, status: int, field: str) -> None:
    answer = client.post("/v1/translate", content=raw.encode(), headers={"Content-Type": "application/json"})
    assert answer.status_code == status, answer.text
    error = answer.json()["error"]
    assert error["status"] == status and error["field"] == field and error["message"]
    assert "Traceback" not in answer.text


def test_a_lone_surrogate_is_a_422_naming_the_item(client) -> None:
    for path, body, field, position in (("/v1/translate", '{"texts": ["Ein Mann.", "Ein \\ud800"]}', "texts[1]", 5),
                                        ("/v1/attention", '{"text": "\\ud800"}', "text", 1)):
        answer = client.post(path, content=body.encode(), headers={"Content-Type": "application/json"})
        assert answer.status_code == 422, answer.text
        assert answer.json()["error"] == {"status": 422, "field": field, "message": (
            f"lone surrogate \\ud800 at character {position} is not a Unicode character; send Unicode text")}


def test_attention_checks_its_input_too(client) -> None:
    for body, field in (({"text": ""}, "text"), ({"text": "a", "nbest": 2}, "nbest"),
                        ({"text": "a", "texts": ["a"]}, "texts")):
        answer = client.post("/v1/attention", json=body)
        assert answer.status_code == 422 and answer.json()["error"]["field"] == field


def test_unknown_paths_and_methods_are_json_errors(client) -> None:
    assert client.get("/v2/nothing").json()["error"]["status"] == 404
    assert client.get("/v1/translate").json()["error"]["status"] == 405


def test_a_full_queue_answers_503_with_retry_after(tiny_checkpoint) -> None:
    with TestClient(create_app(tiny_checkpoint, ServeSettings(max_queue=2, engine_options=ON_CPU))) as small:
        answer = small.post("/v1/translate", json={"texts": ["eins", "zwei", "drei"], **SHORT})
        assert answer.status_code == 503 and int(answer.headers["Retry-After"]) >= 1
        assert answer.json()["error"]["message"].startswith("server busy")
        assert small.post("/v1/translate", json={"texts": ["eins", "zwei"], **SHORT}).status_code == 200


def test_an_unexpected_failure_is_a_500_without_traceback(tiny_checkpoint) -> None:
    translator = Translator.load(tiny_checkpoint, SearchConfig(), options=EngineOptions(device="cpu"))
    translator.tokenizer = None  # breaks every request inside the server, as a bug would
    settings = ServeSettings(engine_options=ON_CPU)
    with TestClient(create_app(translator, settings), raise_server_exceptions=False) as broken:
        answer = broken.post("/v1/translate", json={"text": SENTENCE})
    assert answer.status_code == 500
    assert answer.json()["error"]["message"].startswith("internal error") and "Traceback" not in answer.text
    assert json.loads(answer.text)["error"]["field"] is None


def test_a_beam_the_search_refuses_is_a_422_naming_it_even_under_a_wider_max_beam(tiny_checkpoint) -> None:
    with TestClient(create_app(tiny_checkpoint, ServeSettings(max_beam=300, engine_options=ON_CPU))) as wide:
        answer = wide.post("/v1/translate", json={"text": SENTENCE, "beam": 280})
    assert answer.status_code == 422, answer.text
    assert answer.json()["error"]["field"] == "beam" and "search.beam_size=280" in answer.json()["error"]["message"]


def test_a_request_over_the_decode_work_bound_is_a_422_naming_it(tiny_checkpoint) -> None:
    settings = ServeSettings(max_request_tokens=60, engine_options=ON_CPU)
    with TestClient(create_app(tiny_checkpoint, settings)) as bounded:
        ids = len(Translator.load(tiny_checkpoint, options=EngineOptions(device="cpu")).encode([SENTENCE])[0])
        fits = bounded.post("/v1/translate", json={"texts": [SENTENCE] * (60 // (2 * ids)), "beam": 2, **SHORT})
        over = bounded.post("/v1/translate", json={"texts": [SENTENCE] * (60 // (2 * ids) + 1), "beam": 2, **SHORT})
        narrower = bounded.post("/v1/translate", json={"texts": [SENTENCE] * (60 // (2 * ids) + 1), "beam": 1})
    assert fits.status_code == narrower.status_code == 200
    assert over.status_code == 422 and over.json()["error"]["field"] == "texts"
    assert over.json()["error"]["message"].endswith("at most 60 per request (the server's max_request_tokens): send "
                                                    "fewer or shorter texts, or ask for a narrower beam")


def test_settings_out_of_range_name_their_field() -> None:
    with pytest.raises(ConfigError, match="serve.max_queue=0 must be >= 1") as error:
        ServeSettings(max_queue=0)
    assert error.value.field == "serve.max_queue"  # the command line names its flag: tests/serve/test_startup.py
    with pytest.raises(ConfigError, match="serve.batch_wait_ms=-1.0"):
        ServeSettings(batch_wait_ms=-1)
    for endless in (float("inf"), float("nan"), 1e9):  # a wait no request would live through
        with pytest.raises(ConfigError, match="serve.batch_wait_ms"):
            ServeSettings(batch_wait_ms=endless)


def test_a_request_without_search_settings_gets_the_models_stored_search(tiny_checkpoint, tmp_path) -> None:
    import shutil

    from vaswani.decoding.config import StoredSearch

    checkpoint = tmp_path / "checkpoint"
    shutil.copytree(tiny_checkpoint, checkpoint)
    stored = SearchConfig(beam_size=2, alpha=1.5, max_len_b=4)
    StoredSearch.of(stored).write(checkpoint)
    with TestClient(create_app(checkpoint, ServeSettings(engine_options=ON_CPU))) as stored_client:
        assert stored_client.get("/v1/model").json()["search"]["beam_size"] == 2
        text = "Ein Mann fährt Fahrrad."
        expected = Translator.load(checkpoint, stored, options=EngineOptions(device="cpu")).translate([text])[0]
        assert stored_client.post("/v1/translate", json={"text": text}).json()["translations"][0]["text"] == expected
        greedy = Translator.load(checkpoint, SearchConfig(beam_size=1, max_len_b=4),
                                 options=EngineOptions(device="cpu")).translate([text])
        answer = stored_client.post("/v1/translate", json={"text": text, "beam": 1}).json()
        assert answer["translations"][0]["text"] == greedy[0]  # a setting in the request wins; the others stay stored
        too_many = stored_client.post("/v1/translate", json={"text": text, "nbest": 3})  # the stored beam is 2
        assert too_many.status_code == 422 and too_many.json()["error"]["field"] == "nbest"


def test_a_compiled_server_answers_like_the_eager_translator(tiny_checkpoint, reference, test_pairs) -> None:
    """`serve --compile` compiles the decoding step at start-up; its answers are the eager translator's."""
    import torch

    torch.compiler.reset()  # a fresh start: no earlier test's graphs count against torch.compile's recompile limit
    settings = ServeSettings(engine_options=replace(ON_CPU, compile=True))
    with TestClient(create_app(tiny_checkpoint, settings)) as compiled:
        texts = test_pairs[0][:4]
        body = compiled.post("/v1/translate", json={"texts": texts, "beam": 2, **SHORT}).json()
        assert [t["text"] for t in body["translations"]] == reference.translate(texts)


def test_a_damaged_meta_json_is_served_all_the_same_and_reports_nothing(tiny_checkpoint, tmp_path, caplog) -> None:
    """What a checkpoint says of its training is optional: a damaged meta.json is logged in one line, and the model
    is served with nothing reported of its training."""
    checkpoint = Path(shutil.copytree(tiny_checkpoint, tmp_path / "step_0000010"))
    (checkpoint / "meta.json").write_text(json.dumps({"step": "ten"}))
    with caplog.at_level(logging.WARNING, logger="vaswani.serve"), \
            TestClient(create_app(checkpoint, ServeSettings(engine_options=ON_CPU))) as served:
        info = served.get("/v1/model").json()
    assert (info["id"], info["step"], info["val_bleu"]) == ("step_0000010", None, None)
    warnings = [record.getMessage() for record in caplog.records if record.levelno == logging.WARNING]
    assert len(warnings) == 1 and f'{checkpoint / "meta.json"}: field "step"' in warnings[0]


def test_score_gives_each_pair_the_translators_scores(client, tiny_checkpoint, test_pairs) -> None:
    sources, targets = test_pairs[0][:3], test_pairs[1][:3]
    answer = client.post("/v1/score", json={"sources": sources, "targets": targets, "alpha": 1.0})
    assert answer.status_code == 200, answer.text
    scorer = Translator.load(tiny_checkpoint, SearchConfig(beam_size=1, alpha=1.0),
                             EngineOptions(device="cpu"))
    expected = scorer.score(sources, targets)
    scores = answer.json()["scores"]
    assert [s["log_prob"] for s in scores] == pytest.approx([p.log_prob for p in expected], abs=1e-5)
    assert [s["score"] for s in scores] == pytest.approx([p.score for p in expected], abs=1e-5)
    assert [s["tokens"] for s in scores] == [p.tokens for p in expected]


@pytest.mark.parametrize("body, field", [
    ({"sources": ["Ein Hund."], "targets": []}, "targets"),
    ({"sources": [], "targets": []}, "sources"),
    ({"sources": ["Ein Hund."], "targets": [" "]}, "targets[0]"),
    ({"sources": ["Ein Hund."] * 5, "targets": ["A dog."] * 5}, "sources"),
    ({"sources": ["Ein Hund."], "targets": ["A dog."], "alpha": -1}, "alpha"),
    ({"sources": ["Ein Hund."], "targets": ["A dog."], "beam": 2}, "beam"),
])
def test_score_requests_out_of_range_get_a_422_naming_the_field(client, body, field) -> None:
    answer = client.post("/v1/score", json=body)
    assert answer.status_code == 422 and answer.json()["error"]["field"] == field, answer.text


def test_translate_with_target_prefixes_completes_them(client, reference, test_pairs) -> None:
    one = client.post("/v1/translate", json={"text": SENTENCE, "target_prefix": "A man", "beam": 2, **SHORT})
    assert one.status_code == 200, one.text
    assert one.json()["translation"] == reference.translate_nbest([SENTENCE], prefixes=["A man"])[0][0].text
    assert one.json()["translation"].startswith("A man")
    texts, prefixes = test_pairs[0][:3], ["Two dogs", "", "A"]
    body = {"texts": texts, "target_prefix": prefixes, "beam": 2, **SHORT}
    several = client.post("/v1/translate", json=body)
    assert several.status_code == 200, several.text
    got = [t["text"] for t in several.json()["translations"]]
    assert got == [n[0].text for n in reference.translate_nbest(texts, prefixes=prefixes)]
    assert got[0].startswith("Two dogs") and got[2].startswith("A")


@pytest.mark.parametrize("body, field", [
    ({"text": SENTENCE, "target_prefix": ["A man"]}, "target_prefix"),
    ({"texts": [SENTENCE, SENTENCE], "target_prefix": ["A man"]}, "target_prefix"),
    ({"texts": [SENTENCE], "target_prefix": ["x" * 201]}, "target_prefix[0]"),
    ({"text": SENTENCE, "target_prefix": "dog " * 40, **SHORT}, "target_prefix"),
    ({"text": SENTENCE, "target_prefix": 3}, "target_prefix"),
])
def test_a_target_prefix_that_cannot_be_forced_is_a_422_naming_it(client, body, field) -> None:
    answer = client.post("/v1/translate", json=body)
    assert answer.status_code == 422 and answer.json()["error"]["field"] == field, answer.text


def test_translate_with_constraints_places_every_phrase(client, reference, test_pairs) -> None:
    texts = [SENTENCE, test_pairs[0][0]]
    constraints = [["bicycle"], []]
    body = {"texts": texts, "constraints": constraints, "beam": 2, "max_len_a": 0.0, "max_len_b": 10}
    answer = client.post("/v1/translate", json=body)
    assert answer.status_code == 200, answer.text
    got = [t["text"] for t in answer.json()["translations"]]
    wider = reference.with_search(replace(reference.config, max_len_b=10), 64, None)
    assert got == [n[0].text for n in wider.translate_nbest(texts, constraints=constraints)]
    assert "bicycle" in got[0] and got[1] == wider.translate_nbest(texts[1:])[0][0].text


@pytest.mark.parametrize("body, field", [
    ({"text": SENTENCE, "constraints": ["bicycle"]}, "constraints[0]"),
    ({"texts": [SENTENCE, SENTENCE], "constraints": [["bicycle"]]}, "constraints"),
    ({"text": SENTENCE, "constraints": [["bicycle", " "]]}, "constraints[0][1]"),
    ({"text": SENTENCE, "constraints": [["x" * 201]]}, "constraints[0][0]"),
    ({"text": SENTENCE, "constraints": [["dog"] * 9]}, "constraints[0]"),
    ({"text": SENTENCE, "constraints": [["dog " * 40]], **SHORT}, "constraints[0]"),
    ({"text": SENTENCE, "constraints": [["dog"]], "sample": True}, "constraints[0]"),
])
def test_constraints_that_cannot_be_placed_are_a_422_naming_them(client, body, field) -> None:
    answer = client.post("/v1/translate", json=body)
    assert answer.status_code == 422 and answer.json()["error"]["field"] == field, answer.text


def test_translate_with_alignments_gives_each_hypothesis_its_pharaoh_pairs(client, reference) -> None:
    body = {"text": SENTENCE, "beam": 2, "nbest": 2, "alignments": True, **SHORT}
    answer = client.post("/v1/translate", json=body)
    assert answer.status_code == 200, answer.text
    expected = reference.translate_nbest([SENTENCE], alignments=True)[0]
    nbest = answer.json()["translations"][0]["nbest"]
    assert [h["alignment"] for h in nbest] == [h.alignment for h in expected]
    assert all(h.alignment is not None for h in expected)
    plain = client.post("/v1/translate", json={"text": SENTENCE, "beam": 2, **SHORT}).json()
    assert "alignment" not in plain["translations"][0]["nbest"][0]
    assert client.post("/v1/translate", json={"text": SENTENCE, "alignments": "yes"}).status_code == 422


def test_sampling_requests_draw_reproducibly_and_bad_settings_name_their_field(client,
                                                                               tiny_checkpoint) -> None:
    body = {"text": SENTENCE, "sample": True, "top_p": 0.9, "seed": 3, "nbest": 3, **SHORT}
    first = client.post("/v1/translate", json=body)
    assert first.status_code == 200, first.text
    assert client.post("/v1/translate", json=body).json()["translations"] == first.json()["translations"]
    search = SearchConfig(beam_size=1, nbest=3, sample=True, top_p=0.9, seed=3, **SHORT)
    drawn = Translator.load(tiny_checkpoint, search, EngineOptions(engine="torch", device="cpu"))
    assert [h["text"] for h in first.json()["translations"][0]["nbest"]] == [
        h.text for h in drawn.translate_nbest([SENTENCE])[0]]
    for bad, field in (({"top_k": 3}, "sample"), ({"sample": True, "beam": 2}, "beam"),
                       ({"sample": True, "top_p": 0}, "top_p"), ({"sample": True, "nbest": 5}, "nbest")):
        answer = client.post("/v1/translate", json={"text": SENTENCE, **bad})
        assert answer.status_code == 422 and answer.json()["error"]["field"] == field, answer.text


def test_an_attention_answer_over_its_byte_bound_is_a_422_naming_the_text(tiny_checkpoint) -> None:
    from vaswani.serve.attention import attention_bytes

    translator = Translator.load(tiny_checkpoint, options=EngineOptions(device="cpu"))
    tokens = len(translator.encode([SENTENCE])[0])
    search = replace(translator.config, max_len_a=0.0, max_len_b=6)
    most = attention_bytes(translator, tokens, search, "torch")
    settings = ServeSettings(max_attention_bytes=most, engine_options=ON_CPU)
    with TestClient(create_app(tiny_checkpoint, settings)) as bounded:
        fits = bounded.post("/v1/attention", json={"text": SENTENCE, "attention_from": "torch", **SHORT})
        over = bounded.post("/v1/attention", json={"text": SENTENCE, "attention_from": "torch",
                                                   "max_len_a": 0.0, "max_len_b": 7})
    assert fits.status_code == 200 and len(fits.content) <= most, fits.text
    assert over.status_code == 422 and over.json()["error"]["field"] == "text"
    assert over.json()["error"]["message"].endswith(
        f"at most {most:,} (the server's max_attention_bytes): send a shorter text or a lower "
        "max_len_a/max_len_b")


def test_a_checkpoint_that_is_an_ensemble_is_served_as_its_members(tiny_checkpoint, tmp_path) -> None:
    """`serve` loads through Translator.load: an ensemble checkpoint (ensemble.json) answers as its members
    searched as one, on the torch engine (the CPU, in the server's precision)."""
    import torch

    from vaswani.config import ModelConfig
    from vaswani.decoding.stored_ensemble import member_name, write_stored_ensemble
    from vaswani.io import write_manifest
    from vaswani.model import Transformer
    from vaswani.model.serialization import CHECKPOINT_KIND, save_model

    stored = Path(shutil.copytree(tiny_checkpoint, tmp_path / "final"))
    members = [Path(shutil.copytree(tiny_checkpoint, stored / member_name(0))), stored / member_name(1)]
    members[1].mkdir()
    shutil.copy(tiny_checkpoint / "tokenizer.json", members[1] / "tokenizer.json")
    torch.manual_seed(4)  # another model than the checkpoint's own
    save_model(Transformer(ModelConfig.preset("tiny", dropout=0.0, vocab_size=1000)), members[1],
               members[1] / "tokenizer.json")
    write_manifest(members[1], CHECKPOINT_KIND)
    write_stored_ensemble(stored, [1.0, 1.0])
    search = SearchConfig(beam_size=2, **SHORT)
    expected = Translator.load_ensemble(members, search, EngineOptions(engine="torch", device="cpu"))
    settings = ServeSettings(max_beam=4, engine_options=ON_CPU)
    with pytest.warns(Warning, match="is an ensemble of 2"), TestClient(create_app(stored, settings)) as served:
        body = served.post("/v1/translate", json={"text": SENTENCE, "beam": 2, **SHORT})
        assert body.status_code == 200, body.text
        assert body.json()["translation"] == expected.translate([SENTENCE])[0]
