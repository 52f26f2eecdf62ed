"""The attention page in a real browser (Debian's chromium driven by Playwright) against a real server."""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed (dev extra)")
if not Path(CHROMIUM).exists():
    pytest.skip("no chromium browser installed (apt-get install -y chromium)", allow_module_level=True)

SENTENCE = "Ein Hund läuft durch den Schnee."


@contextlib.contextmanager
def opened_page(url: str) -> Iterator[sync_api.Page]:
    """The server's page at ``url`` in headless Chromium."""
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=["--no-sandbox"])
        try:
            tab = browser.new_page(viewport={"width": 1200, "height": 900})
            tab.set_default_timeout(30_000)
            tab.goto(url + "/")
            yield tab
        finally:
            browser.close()


@pytest.fixture
def page(server):
    with opened_page(server.url) as tab:
        yield tab


@pytest.mark.slow
def test_typing_a_sentence_shows_its_translation_and_a_heatmap_of_the_right_shape(page, server) -> None:
    page.fill("#source", SENTENCE)
    page.click("#translate-button")
    page.wait_for_selector("#attention:not([hidden])")

    expected = httpx.post(f"{server.url}/v1/attention", json={"text": SENTENCE, "beam": 4}).json()
    shown = page.inner_text("#translation")
    assert shown == (expected["translation"] or "(empty translation)")
    rows = page.locator("#heatmap .hm-target")
    assert rows.count() == len(expected["target_tokens"])  # one row per target token (</s> included)
    assert page.locator("#heatmap .hm-src").count() == len(expected["source_tokens"])  # one column per source token
    for r in range(rows.count()):
        assert rows.nth(r).locator(".hm-cell").count() == len(expected["source_tokens"])
    assert page.locator("#head").input_value() == "mean"  # the head average by default

    # Hovering a target token lights up the source tokens, the strongest one the most.
    rows.nth(0).locator(".hm-tgt").hover()
    lit = page.locator("#heatmap .hm-src.lit")
    assert lit.count() == len(expected["source_tokens"])
    strengths = [float(lit.nth(s).evaluate("e => e.style.getPropertyValue('--lit')")) for s in range(lit.count())]
    weights = expected["mean_over_heads"][-1][0]
    assert strengths.index(max(strengths)) == weights.index(max(weights))

    # Another head redraws the same shape.
    page.select_option("#head", "0")
    assert page.locator("#heatmap .hm-target").count() == len(expected["target_tokens"])


@pytest.mark.slow
def test_errors_are_shown_on_the_page(page) -> None:
    page.fill("#source", "   ")
    page.click("#translate-button")
    # checked before asking the server; a bare checkpoint (no run around it) names no language pair
    assert "Type a sentence first" in page.inner_text("#error")

    page.fill("#source", "Wort " * 300)  # over the server's 1000 characters
    page.click("#translate-button")
    page.wait_for_function("document.getElementById('error').textContent.includes('at most 1000')")
    assert page.inner_text("#error").startswith("text:")
    assert page.is_hidden("#attention")


@pytest.mark.slow
def test_on_ctranslate2_the_heatmap_is_its_attention_and_the_torch_models_when_asked(tiny_checkpoint, tmp_path,
                                                                                      start_server) -> None:
    pytest.importorskip("ctranslate2")
    from vaswani.decoding import SearchConfig
    from vaswani.decoding.config import StoredSearch

    checkpoint = Path(shutil.copytree(tiny_checkpoint, tmp_path / "checkpoint",
                                      ignore=shutil.ignore_patterns("ctranslate2")))
    StoredSearch.of(SearchConfig(beam_size=2, length_norm="power", max_len_a=0.0, max_len_b=8)).write(checkpoint)
    server = start_server(checkpoint, "--engine", "ctranslate2")
    try:
        with opened_page(server.url) as tab:
            tab.fill("#source", SENTENCE)
            tab.select_option("#beam", "2")
            tab.click("#translate-button")
            tab.wait_for_selector("#attention:not([hidden])")
            expected = httpx.post(f"{server.url}/v1/attention", json={"text": SENTENCE, "beam": 2}).json()
            # CTranslate2's: the last layer, its heads averaged (no head of its own to pick)
            assert tab.locator("#layer option").all_inner_texts() == ["2 (last)"]
            assert tab.locator("#head option").all_inner_texts() == ["average"]
            assert tab.locator("#heatmap .hm-target").count() == len(expected["target_tokens"])
            assert "ctranslate2" in tab.inner_text("#model")
            # every layer and head: the torch model's, for the same translation
            tab.check("#every-head")
            tab.click("#translate-button")
            tab.wait_for_function("document.querySelectorAll('#head option').length === 5")
            assert tab.locator("#layer option").all_inner_texts() == ["1", "2 (last)"]
            assert tab.inner_text("#translation") == (expected["translation"] or "(empty translation)")
    finally:
        server.stop()


@pytest.mark.slow
def test_constraints_and_the_word_alignment_are_shown_on_the_page(tiny_checkpoint, start_server) -> None:
    server = start_server(tiny_checkpoint, "--engine", "torch")
    try:
        with opened_page(server.url) as tab:
            tab.fill("#source", SENTENCE)
            tab.fill("#constraints", "bicycle\nred car")
            tab.check("#alignment")
            tab.click("#translate-button")
            tab.wait_for_selector("#result:not([hidden])")
            expected = httpx.post(f"{server.url}/v1/translate", json={
                "text": SENTENCE, "beam": 4, "alignments": True, "constraints": [["bicycle", "red car"]]}).json()
            shown = tab.inner_text("#translation")
            assert shown == expected["translation"] and "bicycle" in shown and "red car" in shown
            pairs = expected["translations"][0]["nbest"][0]["alignment"].split()
            assert tab.inner_text("#alignment-pairs").startswith("Alignment: ")
            assert tab.inner_text("#alignment-pairs").count("→") == len(pairs)
            assert tab.is_hidden("#attention") and tab.is_visible("#constraints-note")
    finally:
        server.stop()
