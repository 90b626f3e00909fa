"""Experiment 7's page in headless Chromium: its recorded run drawn, every chart rendered (the faceted one too)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from playwright.sync_api import Browser, expect

from tests.browser.test_app import idle
from tests.support.browser import running_app

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def app_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with running_app(tmp_path_factory.mktemp("streamlit") / "streamlit.log") as (url, _):
        yield url


def test_conversation_page_draws_its_recorded_run(app_url: str, browser: Browser) -> None:
    page = browser.new_page(viewport={"width": 1400, "height": 4000})
    page.goto(app_url + "/conversation")
    idle(page)
    expect(page.get_by_role("heading", name="Experiment 7 · a long conversation: keep, slide a window, or summarize"))\
        .to_be_visible()
    page.get_by_role("button", name="Show recorded results").click()
    idle(page)
    expect(page.get_by_text("Rounds as predicted")).to_be_visible(timeout=60_000)
    charts = page.locator("[data-testid='stVegaLiteChart']")
    expect(charts).to_have_count(5, timeout=60_000)  # five charts, drawn on a busy 2-core machine
    for i in range(5):
        box = charts.nth(i).bounding_box()
        assert box is not None and box["width"] > 200 and box["height"] > 150
        expect(charts.nth(i).locator("canvas, svg").first).to_be_visible(timeout=60_000)
    page.close()
