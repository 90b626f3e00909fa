"""Experiment 6's page in headless Chromium: its recorded run drawn, the three charts rendered."""

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


def test_kv_cache_page_draws_its_recorded_run(app_url: str, browser: Browser) -> None:
    page = browser.new_page(viewport={"width": 1400, "height": 2600})
    page.goto(app_url + "/kv_cache")
    idle(page)
    expect(page.get_by_role("heading", name="Experiment 6 · the KV cache itself")).to_be_visible()
    page.get_by_role("button", name="Show recorded results").click()
    idle(page)
    expect(page.get_by_text("Same answer")).to_be_visible()
    charts = page.locator("[data-testid='stVegaLiteChart']")
    expect(charts).to_have_count(3)
    for i in range(3):
        box = charts.nth(i).bounding_box()
        assert box is not None and box["width"] > 300 and box["height"] > 200
        expect(charts.nth(i).locator("canvas, svg").first).to_be_visible()
    page.close()
