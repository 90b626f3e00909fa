"""The hosted demo as two replicas behind nginx with one PostgreSQL, in headless Chromium: a visitor's run and
budget are there when their next connection lands on the other replica, and after a restart of every replica;
a replica killed with kill -9 mid-run frees its place for the next visitor in line, and its run is listed as cut."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
from playwright.sync_api import Browser, BrowserContext, Page, expect

from core.experiments import output_length
from tests.browser.test_app import idle
from tests.browser.test_store import rounds_table, saved_list
from tests.support.browser import EVENT_MS, reached
from tests.support.fake_openai import FakeOpenAIServer
from tests.support.postgres import Cluster
from tests.support.replicas import ROUTE_COOKIE, Replicas

pytestmark = pytest.mark.browser

PLANNED = output_length.plan(output_length.Settings()).tokens  # the output page's default run
MAIN = "[data-testid='stMainBlockContainer']"
OVER_BUDGET = re.compile(r"tokens a visitor may spend on this demo's key in 24 hours")


LEASE_S = 3


@pytest.fixture(scope="module")
def api() -> Iterator[FakeOpenAIServer]:
    with FakeOpenAIServer() as server:
        yield server


@pytest.fixture(scope="module")
def replicas(api: FakeOpenAIServer, postgres: Cluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Replicas]:
    folder = tmp_path_factory.mktemp("replicas")
    env = {"PATH": "/usr/bin:/bin", "HOME": str(folder), "PREFILL_LAB_HOSTED": "true",
           "PREFILL_LAB_ALLOWED_BASE_URLS": api.base_url, "PREFILL_LAB_ALLOW_LOOPBACK": "true",
           "PREFILL_LAB_DB": postgres.url(postgres.database()), "PREFILL_LAB_MAX_CONCURRENT_RUNS": "1",
           "PREFILL_LAB_LEASE_S": str(LEASE_S), "PREFILL_LAB_MAX_TOKENS_PER_VISITOR": str(PLANNED + 10)}  # one run
    with Replicas(folder, 2, env) as group:
        yield group


def route(context: BrowserContext, replicas: Replicas, value: str) -> None:
    """Send this browser's next connections where nginx's route cookie ``value`` goes."""
    context.add_cookies([{"name": ROUTE_COOKIE, "value": value, "url": replicas.url}])


def open_output(page: Page, url: str) -> None:
    """The output-length page with the fake API's model."""
    page.goto(url, timeout=EVENT_MS)
    idle(page)
    model = page.get_by_label("Model")
    model.fill("ok")
    model.press("Enter")
    idle(page)


def press_run(page: Page) -> None:
    page.locator(MAIN).get_by_role("button", name="Run", exact=True).click()


def test_a_visitors_run_and_budget_follow_them_to_the_other_replica_and_through_a_restart_of_every_replica(
        browser: Browser, replicas: Replicas) -> None:
    first, other = replicas.route_to(0), replicas.route_to(1)
    context = browser.new_context(viewport={"width": 2400, "height": 1600})
    route(context, replicas, first)
    page = context.new_page()
    open_output(page, replicas.url + "/output")
    press_run(page)
    expect(page.get_by_text("Done: 5 rounds.")).to_be_visible(timeout=EVENT_MS)
    measured = [row["total_ms"] for row in rounds_table(page, 5)]
    link = page.url
    assert "visitor=" in link and set(replicas.landed(first)) == {0}

    def same_visitor_on(value: str, replica: int) -> None:
        since = replicas.log_size()
        route(context, replicas, value)
        open_output(page, link)
        landed = set(replicas.landed(value, since=since))
        assert landed == {replica}, f"the page's requests went to replicas {landed}, not only to {replica}"
        assert [row["total_ms"] for row in rounds_table(page, 5)] == measured
        (listed,) = saved_list(page)
        assert listed["rounds"] == "5" and listed["status"] == "finished" and listed["model"] == "ok"
        press_run(page)  # the visitor's budget was spent on the other replica, or before the restart
        expect(page.get_by_text(OVER_BUDGET)).to_be_visible(timeout=EVENT_MS)

    same_visitor_on(other, 1)
    replicas.restart_all()
    same_visitor_on(first, 0)
    context.close()


def test_a_replica_killed_mid_run_frees_its_place_for_the_next_in_line_and_its_run_is_listed_as_cut(
        browser: Browser, replicas: Replicas, api: FakeOpenAIServer) -> None:
    pages = []
    for replica in (0, 1):  # two visitors, one on each replica; one run at a time in all
        context = browser.new_context(viewport={"width": 2400, "height": 1600})
        route(context, replicas, replicas.route_to(replica))
        pages.append(context.new_page())
        open_output(pages[-1], replicas.url + "/output")
    cut, waiting = pages
    api.token_delay = 0.3
    try:
        press_run(cut)
        expect(cut.get_by_text(reached(2, 5))).to_be_visible(timeout=EVENT_MS)
        press_run(waiting)
        expect(waiting.get_by_text("In line: you are number 1.")).to_be_visible(timeout=EVENT_MS)
        replicas.kill(0)
    finally:
        api.token_delay = 0.005
    expect(waiting.get_by_text("Done: 5 rounds.")).to_be_visible(timeout=EVENT_MS)
    open_output(cut, cut.url)  # the killed replica's visitor comes back: nginx sends them to the other one
    (listed,) = saved_list(cut)
    assert listed["status"].startswith("cut") and 1 <= int(listed["rounds"]) < 5, listed
    for page in pages:
        page.context.close()
    replicas.start(0)
