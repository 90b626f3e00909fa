"""The hosted demo in headless Chromium, as a crowd meets it: a line for the cap on runs, a closed tab's run
ended, a visitor over their budget told so, and no request to any host but the app's own."""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from playwright.sync_api import Browser, Page, expect

from core.experiments import output_length
from tests.browser.test_app import idle
from tests.support.browser import EVENT_MS, reached, running_app
from tests.support.fake_openai import FakeOpenAIServer, Handler

pytestmark = pytest.mark.browser

CAP, GRACE_S = 4, 3
PLANNED = output_length.plan(output_length.Settings()).tokens  # the output page's default run
MAIN = "[data-testid='stMainBlockContainer']"


class CountingServer(FakeOpenAIServer):
    """The fake API, counting the requests it serves at once; while ``gate`` is clear, requests hold.

    A request stops counting just before its ``[DONE]`` is written: the client ends its run on reading
    ``[DONE]``, so the next run's first request cannot arrive before the count went down. Counting until
    the handler returned measured this server's own thread scheduling (a loaded CI saw "5 at once")."""

    def __init__(self, token_delay: float) -> None:
        super().__init__(token_delay=token_delay)
        self.gate = threading.Event()
        self.gate.set()
        self.guard = threading.Lock()
        self.inside = 0
        self.most = 0
        server = self

        class Counting(Handler):
            counted = False

            def do_POST(self) -> None:
                with server.guard:
                    server.inside += 1
                    server.most = max(server.most, server.inside)
                self.counted = True
                try:
                    server.gate.wait(180)
                    super().do_POST()
                finally:
                    self._leave()

            def _write(self, data: bytes) -> None:
                if data == b"data: [DONE]\n\n":
                    self._leave()
                super()._write(data)

            def _leave(self) -> None:
                with server.guard:
                    if self.counted:
                        server.inside -= 1
                        self.counted = False

        self.RequestHandlerClass = Counting


@pytest.fixture(scope="module")
def api() -> Iterator[CountingServer]:
    with CountingServer(token_delay=0.5) as server:  # a default run: 32 words, about 16 s
        yield server


@pytest.fixture(scope="module")
def hosted_url(api: CountingServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    log_path = tmp_path_factory.mktemp("streamlit") / "streamlit.log"
    env = {"PATH": "/usr/bin:/bin", "HOME": str(log_path.parent), "PREFILL_LAB_HOSTED": "true",
           "PREFILL_LAB_ALLOWED_BASE_URLS": api.base_url, "PREFILL_LAB_ALLOW_LOOPBACK": "true",
           "PREFILL_LAB_MAX_CONCURRENT_RUNS": str(CAP), "PREFILL_LAB_ABANDON_GRACE_S": str(GRACE_S),
           "PREFILL_LAB_MAX_TOKENS_PER_VISITOR": str(PLANNED + 10)}  # one default run, not two
    with running_app(log_path, env=env) as (url, _):
        yield url, log_path


def visitor(browser: Browser, url: str) -> Page:
    """A new visitor: their own browser context (cookies), on the output-length page with the fake API's model."""
    page = browser.new_context(viewport={"width": 1300, "height": 1200}).new_page()
    page.goto(url + "/output", timeout=EVENT_MS)  # 2 shared cores: a loaded machine opens pages slowly
    idle(page)
    model = page.get_by_label("Model")
    model.fill("ok")
    model.press("Enter")
    idle(page)
    return page


def press_run(page: Page) -> None:
    page.locator(MAIN).get_by_role("button", name="Run", exact=True).click()


def status_of(page: Page) -> str:
    return page.locator(MAIN).inner_text()


def test_eight_visitors_with_a_cap_of_four_four_run_four_wait_in_order_and_start_by_themselves(browser, hosted_url,
                                                                                                api):
    url, _ = hosted_url
    pages = [visitor(browser, url) for _ in range(8)]
    api.gate.clear()  # the running runs hold in their first request while the line is looked at
    try:
        for i, page in enumerate(pages):
            press_run(page)
            shown = re.compile(r"Round \d of 5") if i < CAP else re.compile(f"In line: you are number {i - CAP + 1}\\.")
            expect(page.get_by_text(shown)).to_be_visible(timeout=EVENT_MS)
        for i, page in enumerate(pages[CAP:]):
            assert f"In line: you are number {i + 1}." in status_of(page), "the line keeps its order"
        assert api.inside == CAP, f"{api.inside} requests at once; the cap is {CAP} runs"
    finally:
        api.gate.set()
    for page in pages:  # nobody presses anything: each waiting run starts by itself and ends
        expect(page.get_by_text("Done: 5 rounds.")).to_be_visible(timeout=EVENT_MS)
    assert api.most == CAP, f"{api.most} requests at once; the cap is {CAP} runs"
    for page in pages:
        page.context.close()


def test_a_closed_tabs_run_ends_within_the_grace_period(browser, hosted_url, api):
    url, log_path = hosted_url
    page = visitor(browser, url)
    press_run(page)
    expect(page.get_by_text(reached(2, 5))).to_be_visible(timeout=EVENT_MS)
    page.context.close()
    closed = time.monotonic()
    deadline = closed + GRACE_S + 10
    while "outcome=page closed" not in log_path.read_text():
        assert time.monotonic() < deadline, "the closed tab's run did not end"
        time.sleep(0.2)
    ended = time.monotonic() - closed
    sent = len(api.requests)
    time.sleep(2)
    assert len(api.requests) == sent, "no request after the run ended"
    assert ended < GRACE_S + 3, f"ended {ended:.1f} s after the tab closed (grace {GRACE_S} s)"


def test_a_visitor_over_their_budget_is_told_so(browser, hosted_url):
    url, _ = hosted_url
    page = visitor(browser, url)
    press_run(page)
    expect(page.get_by_text("Done: 5 rounds.")).to_be_visible(timeout=EVENT_MS)
    idle(page)
    press_run(page)
    expect(page.get_by_text(re.compile(r"tokens a visitor may spend on this demo's key in 24 hours"))).to_be_visible(
        timeout=EVENT_MS)
    expect(page.get_by_text(re.compile("Enter your own API key"))).to_be_visible()
    page.context.close()


def test_the_app_makes_no_request_to_any_host_but_its_own(browser, hosted_url):
    url, _ = hosted_url
    own = urlsplit(url).netloc
    context = browser.new_context(viewport={"width": 1300, "height": 1200})
    seen: list[str] = []
    context.on("request", lambda request: seen.append(request.url))
    page = context.new_page()
    page.on("websocket", lambda ws: seen.append(ws.url))
    for path in ("", "/input", "/output", "/cache", "/batch", "/cache_doctor"):
        page.goto(url + path)
        idle(page)
        page.wait_for_timeout(500)  # icons and fonts load after the first paint
    page.goto(url + "/cache")
    idle(page)
    page.locator(MAIN).get_by_role("button", name="Show recorded results").click()
    idle(page)
    expect(page.locator("[data-testid='stVegaLiteChart']").first).to_be_visible(timeout=EVENT_MS)
    page.wait_for_timeout(1000)
    context.close()
    foreign = sorted({u for u in seen if urlsplit(u).netloc != own and not u.startswith(("data:", "blob:"))})
    assert seen and foreign == []
