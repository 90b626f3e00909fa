"""The roofline page in headless Chromium: the user's recorded phases of experiments 1 and 2 on this machine's
roofs (recorded levels of a slow CPU in the probe cache), with the chart drawn and the MFU/MBU table."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator

import pytest
from playwright.sync_api import expect, sync_playwright

from core.roofline import peaks
from core.roofline.peaks import Ceiling, Roof
from tests.browser.test_app import READ_TABLE, idle
from tests.support.browser import CHROMIUM, CHROMIUM_ARGS, running_app

pytestmark = pytest.mark.browser
SLOW = Roof("AMD EPYC Zen 1, 2 cores", Ceiling(15.3e9, "numpy float64 sum"), Ceiling(73e9, "numpy float32 matmul"),
            "2026-11-30")


@pytest.fixture(scope="module")
def app_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    cache = tmp_path_factory.mktemp("cache")
    store = cache / "prefill-lab" / "roofline.json"
    store.parent.mkdir(parents=True)
    store.write_text(json.dumps({peaks.machine_key(): SLOW.to_dict()}))
    log = tmp_path_factory.mktemp("streamlit") / "streamlit.log"
    with running_app(log, env={**os.environ, "XDG_CACHE_HOME": str(cache)}) as (url, _):
        yield url


def test_roofline_page_draws_the_users_phases(app_url: str) -> None:
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1400, "height": 2400})
        page.goto(app_url + "/input")
        idle(page)
        page.get_by_role("button", name="Show recorded results").click()
        idle(page)
        expect(page.locator("[data-testid='stDataFrame']").first).to_be_visible()  # the recorded rounds are in
        page.get_by_role("link", name="Experiment 2 · output length").click()
        idle(page)
        page.get_by_role("button", name="Show recorded results").click()
        idle(page)
        expect(page.locator("[data-testid='stDataFrame']").first).to_be_visible()  # the recorded rounds are in
        expect(page.get_by_text("Prediction for this machine:")).to_be_visible()
        page.get_by_role("link", name="Experiment 5 · your machine's limits").click()
        idle(page)
        expect(page.get_by_text("Ridge point", exact=True)).to_be_visible()
        chart = page.locator("[data-testid='stVegaLiteChart']").first
        expect(chart).to_be_visible()
        box = chart.bounding_box()
        assert box is not None and box["width"] > 300 and box["height"] > 300
        expect(chart.locator("canvas, svg").first).to_be_visible()
        expect(page.locator("[data-testid='stDataFrame']").first).to_be_visible()
        deadline, rows = time.monotonic() + 60, []
        while time.monotonic() < deadline and len(rows or []) < 2:  # the grid fills its accessible table row by row
            time.sleep(0.2)
            rows = page.evaluate(READ_TABLE)
        assert [(r["phase"], r["run"]) for r in rows] == [("prefill", "experiment 1"), ("decode", "experiment 2")]
        assert all(r["MBU"].endswith("%") and r["MFU"] for r in rows), rows
        assert page.locator("[data-testid='stException']").count() == 0
        browser.close()
