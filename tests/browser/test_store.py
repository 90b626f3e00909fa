"""Saved runs in the real app (`streamlit run`, headless Chromium, the fake API): a reload, a second tab,
another visitor, and a `kill -9` of the app in the middle of experiment 3."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page, expect

from core.experiments.output_length import ID as OUTPUT
from core.experiments.prefix_cache import ID as CACHE
from core.store import CUT, RunStore
from tests.support.apptest import ROOT
from tests.support.browser import EVENT_MS, IDLE, running_app
from tests.support.fake_openai import FakeOpenAIServer

pytestmark = pytest.mark.browser

READ_TABLE = """() => [...document.querySelectorAll("[data-testid='stDataFrame'] table")].map(table => {
  const head = [...table.querySelectorAll("thead th")].map(th => th.innerText);
  return [...table.querySelectorAll("tbody tr")].map(tr => Object.fromEntries(
    [...tr.querySelectorAll("td")].map((td, i) => [head[i], td.innerText])));
})"""


@contextmanager
def streamlit(db: Path, log: Path, **env: str) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    environ = {**os.environ, "PREFILL_LAB_DB": str(db), "LLAMA_SERVER_BIN": str(ROOT / "no-engine-in-this-test"),
               **env}
    with running_app(log, env=environ) as running:
        yield running


def new_tab(browser: Browser) -> Page:
    return browser.new_context(viewport={"width": 2400, "height": 1600}).new_page()  # the grid draws visible columns


def idle(page: Page, timeout: float = EVENT_MS / 1000) -> None:
    page.wait_for_selector(IDLE, timeout=timeout * 1000)


def open_page(page: Page, url: str) -> None:
    page.goto(url)
    idle(page)


def tables(page: Page) -> list[list[dict[str, str]]]:
    return page.evaluate(READ_TABLE)


def rounds_table(page: Page, rows: int) -> list[dict[str, str]]:
    """The page's rounds table once it has ``rows`` rows (the first table: the saved list is below it)."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        found = tables(page)
        if found and len(found[0]) == rows and "round" in found[0][0]:
            return found[0]
        time.sleep(0.2)
    raise AssertionError(f"no rounds table with {rows} rows: {tables(page)}")


def table_with(page: Page, column: str) -> list[dict[str, str]]:
    """The first table on the page that has ``column``, once the data grid has drawn it."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        found = [t for t in tables(page) if t and column in t[0]]
        if found:
            return found[0]
        time.sleep(0.2)
    raise AssertionError(f"no table with {column!r}: {tables(page)}")


def saved_list(page: Page) -> list[dict[str, str]]:
    """The 'Saved runs of this experiment' list, opened."""
    page.get_by_text(re.compile(r"^Saved runs of this experiment")).click()
    return table_with(page, "machine")


def run_button(page: Page):  # noqa: ANN201 - a Playwright locator
    return page.get_by_test_id("stMainBlockContainer").get_by_role("button", name="Run", exact=True)


def test_a_run_survives_a_reload_and_shows_in_a_second_tab(browser: Browser, tmp_path: Path) -> None:
    db = tmp_path / "runs.sqlite"
    with FakeOpenAIServer() as fake, streamlit(db, tmp_path / "streamlit.log") as (url, _):
        page = new_tab(browser)
        open_page(page, url + "/output")
        page.get_by_test_id("stSidebar").get_by_text("OpenAI-compatible API").click()
        idle(page)
        for label, value in (("Base URL", fake.base_url), ("Model", "ok")):
            box = page.get_by_test_id("stSidebar").get_by_label(label)
            box.fill(value)
            box.press("Enter")
            idle(page)
        run_button(page).click()
        expect(page.get_by_text("Done: 5 rounds.")).to_be_visible(timeout=EVENT_MS)
        measured = rounds_table(page, 5)

        page.reload()  # the session is gone: a new one, with the embedded backend and no engine
        idle(page)
        after = rounds_table(page, 5)
        assert [r["total_ms"] for r in after] == [r["total_ms"] for r in measured]
        expect(page.locator("[data-testid='stVegaLiteChart']").first).to_be_visible()  # drawn again
        (listed,) = saved_list(page)
        assert listed["rounds"] == "5" and listed["status"] == "finished" and listed["model"] == "ok"
        with page.expect_download() as download:
            page.get_by_role("button", name="Download HTML report").click()
        report = Path(download.value.path()).read_text(encoding="utf-8")
        assert report.startswith("<!DOCTYPE html>") and "Experiment 2" in report and listed["run"] in report

        second = new_tab(browser)
        open_page(second, url + "/output")
        assert [r["total_ms"] for r in rounds_table(second, 5)] == [r["total_ms"] for r in measured]
        (listed_there,) = saved_list(second)
        assert listed_there["run"] == listed["run"]
    (saved,) = RunStore.open(str(db)).runs(OUTPUT)
    assert saved.rounds == 5 and saved.status == "done"


HOSTED = {"PREFILL_LAB_HOSTED": "true", "PREFILL_LAB_ALLOW_LOOPBACK": "true"}


def test_hosted_visitors_keep_their_runs_apart_and_a_killed_app_leaves_a_cut_run(browser: Browser,
                                                                                tmp_path: Path) -> None:
    db, log = tmp_path / "runs.sqlite", tmp_path / "streamlit.log"
    with FakeOpenAIServer(token_delay=0.3) as fake:  # about 2 s a round: time to kill the app mid-run
        env = {**HOSTED, "PREFILL_LAB_ALLOWED_BASE_URLS": fake.base_url}
        with streamlit(db, log, **env) as (url, app):
            page = new_tab(browser)
            open_page(page, url + "/cache")
            visitor_url = page.url
            assert re.search(r"[?&]visitor=[\w-]{22,}", visitor_url), visitor_url
            run_button(page).click()
            store = RunStore.open(str(db))
            deadline = time.monotonic() + 90
            while time.monotonic() < deadline:
                running = [r for r in store.runs(CACHE) if r.source == "measured"]
                if running and running[0].rounds >= 3:
                    break
                time.sleep(0.1)
            else:
                pytest.fail("experiment 3 did not reach round 3")
            os.killpg(app.pid, signal.SIGKILL)
            app.wait(60)
        (cut,) = [r for r in RunStore.open(str(db)).runs(CACHE) if r.source == "measured"]
        assert cut.status == CUT and 3 <= cut.rounds < 12 and cut.owner

        with streamlit(db, log, **env) as (url, _):
            again = new_tab(browser)
            open_page(again, url + "/runs?" + visitor_url.split("?", 1)[1])  # the visitor's own link, later
            expect(again.get_by_role("heading", name="Saved runs")).to_be_visible()
            rows = table_with(again, "experiment")
            mine = [r for r in rows if r["source"] == "measured"]
            assert len(mine) == 1 and mine[0]["rounds"] == str(cut.rounds)
            assert mine[0]["status"] == "cut: the app stopped during the run"

            open_page(again, url + "/cache?" + visitor_url.split("?", 1)[1])
            assert len(rounds_table(again, cut.rounds)) == cut.rounds  # the rounds before the kill, drawn again

            stranger = new_tab(browser)
            open_page(stranger, url + "/runs")
            assert re.search(r"[?&]visitor=", stranger.url) and stranger.url != again.url
            rows = table_with(stranger, "experiment")
            assert [r["source"] for r in rows] == ["published reference"]  # nothing of the other visitor's
