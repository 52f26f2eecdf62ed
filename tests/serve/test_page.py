"""The attention page in a real browser (Debian's chromium driven by Playwright) against a real server."""

from __future__ import annotations

import shutil
from pathlib import Path

import httpx
import pytest

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed (dev extra)")
if not Path(CHROMIUM).exists():
    pytest.skip("no chromium browser installed (apt-get install -y chromium)", allow_module_level=True)

SENTENCE = "Ein Hund läuft durch den Schnee."


@pytest.fixture
def page(server):
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=["--no-sandbox"])
        try:
            tab = browser.new_page(viewport={"width": 1200, "height": 900})
            tab.set_default_timeout(30_000)
            tab.goto(server.url + "/")
            yield tab
        finally:
            browser.close()


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
    assert "Type a German sentence" in page.inner_text("#error")  # checked before asking the server

    page.fill("#source", "Wort " * 300)  # over the server's 1000 characters
    page.click("#translate-button")
    page.wait_for_function("document.getElementById('error').textContent.includes('at most 1000')")
    assert page.inner_text("#error").startswith("text:")
    assert page.is_hidden("#attention")
