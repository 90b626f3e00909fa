"""The hosted demo's waiting and spending: a first-come-first-served line for the cap on runs, runs per
visitor, runs of closed pages ended, token budgets on the operator's key, and what the operator's log says."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from string import Formatter
from typing import Any

import pytest

from core.backends import ChatRequest, OpenAICompatBackend
from core.experiments.base import RunContext
from core.hosting import RUN_LOG, HostedSettings, Refused, TokenLedger, load_settings
from core.records import RoundResult
from core.runs.runner import DONE, QUEUED, RUNNING, STOPPED, BackgroundRun, RunQueue, active_runs
from core.words import LANGUAGES, load
from tests.support.apptest import rendered
from tests.unit.test_hosting import hosted_app
from ui.text import LANG_KEY, Texts


class Gate:
    """A source whose runs hold until released, counting how many are inside at once and in which order
    they began."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.guard = threading.Lock()
        self.inside = 0
        self.most = 0
        self.began: list[str] = []

    def source(self, name: str):
        def rows(run: RunContext) -> Iterator[RoundResult]:
            with self.guard:
                self.inside += 1
                self.most = max(self.most, self.inside)
                self.began.append(name)
            try:
                while not self.release.wait(0.02) and not run.stopped():
                    pass
                yield RoundResult(name, 1)
            finally:
                with self.guard:
                    self.inside -= 1
        return rows


def wait_until(condition, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def test_eight_runs_with_a_cap_of_four_four_run_four_wait_in_order_and_start_by_themselves():
    gate = Gate()
    runs = []
    for i in range(8):
        runs.append(BackgroundRun("x", {}, gate.source(f"v{i}"), visitor=f"v{i}").start(max_concurrent=4))
        time.sleep(0.01)  # arrival order
    try:
        wait_until(lambda: len(gate.began) == 4)
        time.sleep(0.2)
        assert [r.snapshot().status for r in runs[:4]] == [RUNNING] * 4
        assert [r.snapshot().status for r in runs[4:]] == [QUEUED] * 4
        assert [r.snapshot().queue_position for r in runs[4:]] == [1, 2, 3, 4]
        gate.release.set()  # nobody presses anything again: the line moves by itself
        for run in runs:
            run.join(60)
    finally:
        gate.release.set()
    assert [r.status for r in runs] == [DONE] * 8
    assert gate.most == 4
    assert gate.began[4:] == ["v4", "v5", "v6", "v7"], "the waiting runs started in arrival order"


def test_a_later_arrival_never_starts_before_an_earlier_one():
    """The old polling let a visitor who pressed later start before two who had waited: 30 runs, cap 2."""
    gate = Gate()
    gate.release.set()
    runs = [BackgroundRun("x", {}, gate.source(f"r{i:02d}")).start(max_concurrent=2) for i in range(30)]
    for run in runs:
        run.join(20)
    assert gate.began == [f"r{i:02d}" for i in range(30)]


def test_a_run_stopped_while_in_line_leaves_it_and_the_others_move_up():
    gate = Gate()
    runs = [BackgroundRun("x", {}, gate.source(f"r{i}")).start(max_concurrent=1) for i in range(4)]
    try:
        wait_until(lambda: runs[3].snapshot().queue_position == 3)
        runs[1].stop()
        wait_until(lambda: runs[3].snapshot().queue_position == 2)
        assert runs[2].snapshot().queue_position == 1
    finally:
        gate.release.set()
        for run in runs:
            run.join(60)
    assert runs[1].status == STOPPED and runs[1].rows == [] and "r1" not in gate.began


def test_the_expected_wait_comes_from_recent_runs():
    queue = RunQueue()
    assert queue.expected_wait_s(1, 4) is None
    first = BackgroundRun("x", {}, lambda run: iter(()))
    queue.join(first)
    assert queue.wait_turn(first, 4)
    queue.leave(first, 20.0)
    assert queue.expected_wait_s(1, 4) == 20.0 and queue.expected_wait_s(5, 4) == 40.0


def test_one_visitor_may_not_hold_more_runs_than_allowed_even_pressing_at_once():
    gate = Gate()
    barrier = threading.Barrier(12)
    started: list[BackgroundRun] = []
    refused: list[str] = []
    before = active_runs()

    def press(visitor: str) -> None:
        run = BackgroundRun("x", {}, gate.source(visitor), visitor=visitor)
        barrier.wait()
        try:
            started.append(run.start(max_concurrent=4, per_visitor=1))
        except Refused as exc:
            refused.append(str(exc))

    threads = [threading.Thread(target=press, args=(f"tab-of-{i % 3}",)) for i in range(12)]  # 3 visitors, 4 tabs each
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        assert sorted(r.visitor for r in started) == ["tab-of-0", "tab-of-1", "tab-of-2"]
        assert len(refused) == 9 and all("per visitor" in m for m in refused)
        assert active_runs() == before + 3
    finally:
        gate.release.set()
        for run in started:
            run.join(60)
    again = BackgroundRun("x", {}, lambda run: iter(()), visitor="tab-of-0").start(max_concurrent=4, per_visitor=1)
    again.join(60)
    assert again.status == DONE, "once a visitor's run ended, they may run again"


def test_a_full_line_turns_the_next_run_away_and_a_free_place_lets_it_in():
    gate = Gate()
    runs = [BackgroundRun("x", {}, gate.source(f"r{i}")).start(max_concurrent=1, max_waiting=2) for i in range(3)]
    try:
        wait_until(lambda: runs[2].snapshot().queue_position == 2)
        with pytest.raises(Refused, match="2 runs are already waiting in line") as refused:
            BackgroundRun("x", {}, gate.source("late")).start(max_concurrent=1, max_waiting=2)
        assert refused.value.key == "line_full" and refused.value.params == {"waiting": 2}
    finally:
        gate.release.set()
        for run in runs:
            run.join(60)
    late = BackgroundRun("x", {}, gate.source("late")).start(max_concurrent=1, max_waiting=2)
    late.join(60)
    assert [r.status for r in runs] == [DONE] * 3 and late.status == DONE and "late" in gate.began


def test_every_refusal_reads_in_each_language_with_the_same_fields():
    """The English text is the rule's own (core.hosting); a translation must name the same fields, or a visitor
    would get a KeyError instead of a sentence."""
    fields = {key: sorted(f for _, f, _, _ in Formatter().parse(text) if f) for key, text in Refused.TEXTS.items()}
    for lang in LANGUAGES:
        translated = load(lang).get("refused", {})
        assert set(translated) <= set(Refused.TEXTS), f"{lang}: a translation of no refusal"
        for key, text in translated.items():
            assert sorted(f for _, f, _, _ in Formatter().parse(text) if f) == fields[key], f"{lang}: refused.{key}"
    assert set(load("zh")["refused"]) == set(Refused.TEXTS), "every refusal has a Chinese text"
    exc = Refused("hour_tokens", spent=1700, allowed=2500, tokens=900, minutes=50)
    assert Texts("en").refusal(exc) == str(exc) and "1,700" in str(exc)
    assert Texts("zh").refusal(exc).startswith("本演示的密钥这一小时已用了 2,500 个 token 额度中的大约 1,700 个")


@pytest.mark.slow
def test_a_run_whose_page_is_gone_is_stopped_after_the_grace_and_its_connection_cut():
    gate = Gate()
    page = {"alive": True}
    cut = threading.Event()
    run = BackgroundRun("x", {}, gate.source("left"), page_alive=lambda: page["alive"], grace_s=0.5,
                        on_stop=cut.set).start()
    try:
        wait_until(lambda: run.status == RUNNING)
        page["alive"] = False
        gone = time.monotonic()
        page["alive"] = True  # a reconnect within the grace keeps the run
        time.sleep(0.8)
        assert run.status == RUNNING and not cut.is_set()
        page["alive"] = False
        gone = time.monotonic()
        run.join(60)
        took = time.monotonic() - gone
    finally:
        gate.release.set()
    assert run.status == STOPPED and run.ended_because == "page closed" and cut.is_set()
    assert 0.5 <= took < 1.5


HOSTED = HostedSettings(hosted=True, max_tokens_per_visitor=1000, max_tokens_per_hour=2500)


def test_per_visitor_and_per_hour_budgets_on_the_operators_key():
    now = [1_000_000.0]
    ledger = TokenLedger(clock=lambda: now[0])
    first = ledger.reserve("a", 800, HOSTED)
    with pytest.raises(Refused, match=r"used about 800 of the 1,000 tokens a visitor may spend .* needs about 300"):
        ledger.reserve("a", 300, HOSTED)
    ledger.settle(first, 500)  # the run was stopped early: the rest comes back
    ledger.reserve("a", 300, HOSTED)
    ledger.reserve("b", 900, HOSTED)
    now[0] += 600
    with pytest.raises(Refused, match=r"spent about 1,700 of its 2,500 tokens for this hour.* in about 50 min"):
        ledger.reserve("c", 900, HOSTED)
    now[0] += 3001  # an hour after the first runs: the hourly budget has room again, the visitor's day has not
    ledger.reserve("c", 900, HOSTED)
    with pytest.raises(Refused, match="a visitor may spend"):
        ledger.reserve("a", 300, HOSTED)
    now[0] += 24 * 3600
    ledger.reserve("a", 900, HOSTED)


def test_hosted_defaults_for_the_new_limits():
    settings = load_settings({"PREFILL_LAB_HOSTED": "true"}.get)
    assert (settings.max_runs_per_visitor, settings.max_tokens_per_visitor, settings.max_tokens_per_hour) == (
        1, 600_000, 1_000_000)
    assert settings.abandon_grace_s == 10.0 and settings.max_doctor_files == 8
    local = load_settings({"PREFILL_LAB_ABANDON_GRACE_S": "3"}.get)
    assert not local.hosted and local.max_tokens_per_hour is None and local.abandon_grace_s == 3.0


class LogLines(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


@pytest.fixture()
def run_log() -> Iterator[LogLines]:
    handler = LogLines()
    RUN_LOG.addHandler(handler)
    try:
        yield handler
    finally:
        RUN_LOG.removeHandler(handler)


@pytest.mark.slow
def test_a_hosted_run_is_budgeted_and_logged_for_the_operator_without_the_key(fake_api, run_log):
    """Via the page: the visitor's first run fits the per-visitor budget, the second does not and is told so;
    the log has one line per run with tokens, model and outcome, and never the key."""
    key = "sk-visitor-typed-0123456789"
    # a plan of 108 tokens with its warm-up fits 120; the run spends 36, so the next plan no longer fits
    at = hosted_app(fake_api, PREFILL_LAB_ALLOW_LOOPBACK="true", PREFILL_LAB_MAX_TOKENS_PER_VISITOR="120")
    at.switch_page("app_pages/output.py").run()
    at.multiselect(key="output_lengths").set_value([8]).run()
    at.button(key="run_output").click().run()
    assert any("Done: 1 rounds" in s.value for s in at.success)
    wait_until(lambda: len(run_log.lines) == 1)
    line = run_log.lines[0]
    assert "experiment=output" in line and "model=ok" in line and "outcome=done" in line
    assert "tokens=" in line and "tokens=0 " not in line and "key=none" in line, line
    at.button(key="run_output").click().run()
    assert any("a visitor may spend on this demo's key in 24 hours" in e.value for e in at.error), run_log.lines
    at.radio(key=LANG_KEY).set_value("zh").run()
    at.button(key="run_output").click().run()
    assert any("24 小时内每位访客最多可用本演示的密钥发送 120 个 token" in e.value for e in at.error), "in Chinese"
    assert len(fake_api.requests) == 2, "the refused runs sent nothing"
    at.text_input(key="api_key_input").input(key).run()  # their own key: the demo's budget is not theirs to spend
    at.button(key="run_output").click().run()
    assert len(fake_api.requests) == 4
    wait_until(lambda: len(run_log.lines) == 2)
    assert "key=typed" in run_log.lines[1] and all(key not in line for line in run_log.lines)
    assert key not in rendered(at)


def test_a_hosted_visitor_lands_on_a_preset_whose_key_is_set():
    """The default preset is AI Builder Space; with only a DeepSeek key on the server, a visitor starts on DeepSeek,
    so the first Run carries the key that belongs to its URL."""
    at = hosted_app(None, DEEPSEEK_API_KEY="sk-operator-deepseek-0123456789")
    at.run()
    assert at.session_state["preset"] == "DeepSeek"
    assert at.session_state["base_url"] == "https://api.deepseek.com/v1"
    assert any("DEEPSEEK_API_KEY" in c.value for c in at.sidebar.caption)
    assert at.sidebar.selectbox(key="preset").options == ["AI Builder Space", "DeepSeek", "OpenAI", "OpenRouter"]


class Redirecting(BaseHTTPRequestHandler):
    target = ""

    def log_message(self, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        self.send_response(307)
        self.send_header("Location", self.target)
        self.send_header("Content-Length", "0")
        self.end_headers()


@pytest.mark.slow
def test_a_redirect_is_reported_as_one_with_where_to_and_not_followed(fake_api):
    Redirecting.target = fake_api.base_url + "/chat/completions"
    server = ThreadingHTTPServer(("127.0.0.1", 0), Redirecting)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/v1"
        with OpenAICompatBackend(url, "ok", "sk-secret-0123456789") as backend:
            result = backend.stream_chat(ChatRequest([{"role": "user", "content": "hi"}]))
    finally:
        server.shutdown()
    assert result.error.startswith(f"HTTP 307: the API redirects to {Redirecting.target} (not followed")
    assert "cannot stream" not in result.error
    assert fake_api.requests == [], "the redirect was not followed: the key went nowhere else"


def test_too_many_doctor_files_are_refused_with_a_sentence():
    at = hosted_app(None)
    at.switch_page("app_pages/cache_doctor.py").run()
    uploader = at.file_uploader(key="doctor_files")
    for i in range(10):
        uploader.upload(f"round-{i}.txt", b"hello", "text/plain")
    uploader.run()
    assert any("10 files uploaded; the doctor reads at most 8" in e.value for e in at.error)
