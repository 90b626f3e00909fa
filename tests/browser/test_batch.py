"""Experiment 4's page under `streamlit run`, driven in headless Chromium, on the embedded server with slots."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import Page, expect

from tests.browser import test_app as browser
from tests.browser.test_app import idle
from tests.support.browser import EVENT_MS, reached

pytestmark = pytest.mark.browser

app_url = browser.app_url  # the same fixtures as the other browser tests: the app, one Chromium tab
page = browser.page

CHARTS = "[data-testid='stVegaLiteChart']"


def test_batching_page_draws_its_chart_after_the_first_level(page: Page, app_url: str):
    page.goto(app_url + "/batch")
    idle(page)
    expect(page.get_by_text(re.compile(r"second llama-server with 8 slots"))).to_be_visible(timeout=EVENT_MS)
    assert page.locator(CHARTS).count() == 0, "no chart before a run"

    page.get_by_test_id("stMainBlockContainer").get_by_role("button", name="Run", exact=True).click()
    # level 1 is measured and drawn while level 2 is still running
    expect(page.get_by_text(reached(2, 4, "Level"))).to_be_visible(timeout=EVENT_MS)
    expect(page.locator(CHARTS).first).to_be_visible()
    expect(page.get_by_text("Tokens per second against requests at once")).to_be_visible()

    # while the page redraws, the Stop of the last script run can stand beside the new one (same widget): either
    page.get_by_test_id("stMainBlockContainer").get_by_role("button", name="Stop").first.click()
    stopped = page.get_by_text(re.compile(r"Stopped\. The [1-3] levels measured before the stop are kept\."))
    expect(stopped).to_be_visible(timeout=EVENT_MS)
    expect(page.locator(CHARTS).first).to_be_visible()
