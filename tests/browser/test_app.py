"""The real app under `streamlit run`, driven in headless Debian Chromium, on the embedded server."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator

import pytest
from playwright.sync_api import Page, expect, sync_playwright

from tests.support.browser import CHROMIUM, CHROMIUM_ARGS, EVENT_MS, IDLE, reached, running_app

pytestmark = pytest.mark.browser

DOCUMENT = ("Our deployment runbook. Step one: check the dashboards for error rates. Step two: roll out to one region. "
            "Step three: watch latency for ten minutes before continuing. ") * 12


@pytest.fixture(scope="module")
def app_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with running_app(tmp_path_factory.mktemp("streamlit") / "streamlit.log") as (url, _):
        yield url


@pytest.fixture()
def page(app_url: str) -> Iterator[Page]:
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        tab = browser.new_page(viewport={"width": 1400, "height": 1600})
        yield tab
        browser.close()


def idle(page: Page, timeout: float = EVENT_MS / 1000) -> None:
    page.wait_for_selector(IDLE, timeout=timeout * 1000)


def set_number(page: Page, label: str, value: int) -> None:
    box = page.get_by_label(label)
    box.fill(str(value))
    box.press("Enter")
    idle(page)


ROWS = "[data-testid='stDataFrame'] table tbody tr"
READ_TABLE = """() => {
  const table = document.querySelector("[data-testid='stDataFrame'] table");
  if (!table) return null;
  const head = [...table.querySelectorAll("thead th")].map(th => th.innerText);
  return [...table.querySelectorAll("tbody tr")].map(tr => {
    const cells = [...tr.querySelectorAll("td")].map(td => td.innerText);
    return Object.fromEntries(head.map((name, i) => [name, cells[i]]));
  });
}"""


def table_rows(page: Page, at_least: int = 1) -> list[dict[str, str]]:
    """The rounds table as records, read in one step from the data grid's accessible table."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        rows = page.evaluate(READ_TABLE)
        if rows and len(rows) >= at_least and all("strategy" in row and "recomputed_tokens" in row for row in rows):
            return rows
        time.sleep(0.2)
    raise AssertionError(f"the rounds table did not show {at_least} rounds")


def open_cache_page(page: Page, app_url: str) -> None:
    page.goto(app_url + "/cache")
    idle(page)
    expect(page.get_by_test_id("stAlertContentSuccess").get_by_text("Healthy")).to_be_visible(timeout=EVENT_MS)


def test_prefix_cache_live_rounds_with_uploaded_document(page: Page, app_url: str, tmp_path):
    open_cache_page(page, app_url)
    doc = tmp_path / "runbook.txt"
    doc.write_text(DOCUMENT)
    page.locator("[data-testid='stFileUploader'] input[type='file']").set_input_files(str(doc))
    idle(page)
    expect(page.get_by_text("Your document: runbook.txt.")).to_be_visible()
    expect(page.get_by_text(re.compile(r"tokens, used whole"))).to_be_visible()
    set_number(page, "Rounds per strategy", 3)
    page.get_by_test_id("stMainBlockContainer").get_by_role("button", name="Run", exact=True).click()

    # after round 1 the chart and the table are already there, while the run goes on
    expect(page.get_by_text(reached(2, 6))).to_be_visible(timeout=EVENT_MS)
    expect(page.locator("[data-testid='stVegaLiteChart']").first).to_be_visible()
    first = table_rows(page)
    assert len(first) >= 1 and first[0]["strategy"] == "append_only"

    # after round 3 (the last append-only round) the pattern is already there
    expect(page.get_by_text(reached(4, 6))).to_be_visible(timeout=EVENT_MS)
    table_rows(page, at_least=3)
    _check_cache_pattern(page)

    idle(page)
    expect(page.get_by_text("Done: 6 rounds.")).to_be_visible()
    expect(page.locator(ROWS)).to_have_count(6)
    _check_cache_pattern(page)
    expect(page.get_by_text(re.compile(r"^Shown: from round 2, append only recomputed"))).to_be_visible()
    expect(page.get_by_role("button", name="Download CSV")).to_be_visible()


def test_stop_keeps_completed_rounds_and_language_switch(page: Page, app_url: str):
    open_cache_page(page, app_url)
    set_number(page, "Rounds per strategy", 10)
    set_number(page, "Document budget (tokens)", 1500)
    page.get_by_test_id("stMainBlockContainer").get_by_role("button", name="Run", exact=True).click()
    expect(page.get_by_text(reached(3, 20))).to_be_visible(timeout=EVENT_MS)
    page.get_by_test_id("stMainBlockContainer").get_by_role("button", name="Stop", exact=True).click()
    notice = page.get_by_text(re.compile(r"Stopped\. The \d+ rounds measured before the stop are kept\."))
    expect(notice).to_be_visible(timeout=EVENT_MS)
    kept = int(re.search(r"The (\d+) rounds", notice.inner_text()).group(1))
    assert 2 <= kept < 20
    idle(page)
    main = page.get_by_test_id("stMainBlockContainer")
    expect(main.get_by_role("button", name="Run", exact=True)).to_be_enabled()  # ready for the next run
    expect(main.get_by_role("button", name="Stop", exact=True)).to_be_disabled()
    expect(page.locator(ROWS)).to_have_count(kept)
    expect(page.get_by_role("button", name="Download JSON")).to_be_visible()

    page.get_by_text("中文").click()
    idle(page)
    expect(page.get_by_role("heading", name="实验 3 · 同一段长上下文，一轮又一轮")).to_be_visible()
    expect(page.locator(ROWS)).to_have_count(kept)  # switching the language keeps the rounds


def _check_cache_pattern(page: Page) -> None:
    for row in table_rows(page):
        n_recomputed = int(row["recomputed_tokens"].replace(",", ""))
        n_prompt = int(row["prompt_tokens"].replace(",", ""))
        if row["strategy"] == "append_only" and row["round"] != "1":
            assert n_recomputed <= 32, row
        else:
            assert n_recomputed >= 0.9 * n_prompt, row


def test_two_sessions_are_serialised_and_keep_their_own_results(app_url: str):
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        first, second = (browser.new_context(viewport={"width": 1400, "height": 1600}).new_page() for _ in range(2))
        for tab, rounds in ((first, 15), (second, 2)):
            open_cache_page(tab, app_url)
            set_number(tab, "Rounds per strategy", rounds)
            set_number(tab, "Document budget (tokens)", 600)
        main = "stMainBlockContainer"
        first.get_by_test_id(main).get_by_role("button", name="Run", exact=True).click()
        expect(first.get_by_text(reached(1, 30))).to_be_visible(timeout=EVENT_MS)
        second.get_by_test_id(main).get_by_role("button", name="Run", exact=True).click()
        # the first run has 30 requests to go: the second waits for it, however fast the machine
        expect(second.get_by_text(re.compile(r"^Waiting: another session"))).to_be_visible(timeout=EVENT_MS)
        expect(first.get_by_text(reached(3, 30))).to_be_visible(timeout=EVENT_MS)
        expect(second.get_by_text(re.compile(r"^Waiting: another session"))).to_be_visible()
        first.get_by_test_id(main).get_by_role("button", name="Stop", exact=True).click()
        notice = first.get_by_text(re.compile(r"Stopped\. The \d+ rounds measured before the stop are kept\."))
        expect(notice).to_be_visible(timeout=EVENT_MS)
        kept = int(re.search(r"The (\d+) rounds", notice.inner_text()).group(1))
        expect(second.get_by_text("Done: 4 rounds.")).to_be_visible(timeout=EVENT_MS)
        for tab, count in ((first, kept), (second, 4)):
            idle(tab)
            expect(tab.locator(ROWS)).to_have_count(count)  # each session sees only its own rounds
            _check_cache_pattern(tab)
        browser.close()


def test_a_chinese_browser_opens_in_chinese_and_the_sidebar_choice_wins(app_url: str):
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        tab = browser.new_context(locale="zh-CN", viewport={"width": 1400, "height": 1600}).new_page()
        tab.goto(app_url)
        idle(tab)
        expect(tab.get_by_role("heading", name="一次请求的时间都去哪了？")).to_be_visible(timeout=EVENT_MS)
        tab.get_by_test_id("stSidebar").get_by_text("English").click()
        idle(tab)
        expect(tab.get_by_role("heading", name="Where does a request's time go?")).to_be_visible()
        tab.goto(app_url + "/cache")  # a new session: the browser's language again
        idle(tab)
        expect(tab.get_by_role("heading", name="实验 3 · 同一段长上下文，一轮又一轮")).to_be_visible()
        browser.close()
