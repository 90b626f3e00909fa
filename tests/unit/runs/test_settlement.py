"""What a hosted run is charged once it ends: every request its connection sent, the warm-up, a level cut by Stop
and a stream cut halfway included, and nothing for a request the server refused. Runs through `start_run` against
the fake OpenAI-compatible server on 127.0.0.1 (a real HTTP server), the budgets in a SQLite store's ledger."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from core.backends.base import estimated_tokens
from core.backends.connect import Target
from core.experiments import arrivals as ar
from core.experiments import output_length as ol
from core.experiments.base import WARM_UP_TOKENS
from core.hosting import HostedSettings
from core.runs.runner import DONE, FAILED, STOPPED, BackgroundRun
from core.runs.session import Events, RunOrder, Visit, start_run
from core.store import RunStore, open_store
from core.store.ledger import StoreLedger
from tests.support.fake_openai import WORDS, FakeOpenAIServer


@pytest.fixture
def fake() -> Iterator[FakeOpenAIServer]:
    with FakeOpenAIServer() as server:
        yield server


@pytest.fixture
def ledger(tmp_path: Path) -> StoreLedger:
    return StoreLedger(open_store(str(tmp_path / "runs.sqlite")).db)


def arrivals(settings: ar.Settings) -> RunOrder:
    return RunOrder(ar.ID, {}, ar.plan(settings), lambda conn: lambda run: ar.rounds(run, ar.prepare(settings, conn)))


def output(lengths: tuple[int, ...]) -> RunOrder:
    settings = ol.Settings(lengths=lengths, repeats=1)
    return RunOrder(ol.ID, {}, ol.plan(settings), lambda conn: lambda run: ol.rounds(run, settings))


def started(order: RunOrder, fake: FakeOpenAIServer, ledger: StoreLedger, model: str = "ok",
            ) -> tuple[BackgroundRun, threading.Event]:
    hosted = HostedSettings(hosted=True, allowed_base_urls=(fake.base_url,), allow_loopback=True,
                            max_tokens_per_visitor=10**6)
    ended = threading.Event()
    run = start_run(order, Target("api", fake.base_url, model, api_key="sk-operator"), label=lambda conn: "charged",
                    store=RunStore.memory(), visit=Visit(hosted, ledger, visitor="v1", whose_key="OPERATOR_KEY"),
                    events=Events(on_end=lambda run: ended.set()))
    return run, ended


def usage(request: dict[str, Any]) -> tuple[int, int]:
    """The fake's own counts for one request it answered in full: its prompt, and its answer's words."""
    body = request["body"]
    prompt = sum(len(str(m.get("content", ""))) for m in body["messages"]) // 4
    return prompt, max(1, min(len(WORDS), int(body["max_tokens"])))


def test_experiment_8_plans_its_warm_up_and_is_charged_for_it(fake: FakeOpenAIServer, ledger: StoreLedger) -> None:
    settings = ar.Settings(rates=(1.0,), duration_s=3.0, max_open=4)
    arrivals_count = len(ar.schedule(1.0, 3.0, settings.seed))
    plan = ar.plan(settings)
    warm_up_prompt, warm_up_answer = 1, 2  # "Say OK." on the fake: 7 characters, 2 tokens asked for
    assert plan.tokens == arrivals_count * (settings.prompt_tokens + settings.output_tokens) + WARM_UP_TOKENS
    assert WARM_UP_TOKENS >= warm_up_prompt + warm_up_answer
    run, ended = started(arrivals(settings), fake, ledger)
    assert ended.wait(60) and run.status == DONE and len(run.rows) == 1
    assert fake.requests[0]["body"]["messages"] == [{"role": "user", "content": "Say OK."}]  # the warm-up, first
    assert len(fake.requests) == arrivals_count + 1
    sent = sum(sum(usage(request)) for request in fake.requests)  # every answer finished with its usage
    assert ledger.spent() == sent and sum(usage(fake.requests[0])) == warm_up_prompt + warm_up_answer


def test_a_run_stopped_in_the_middle_of_a_level_is_charged_what_it_sent(fake: FakeOpenAIServer,
                                                                        ledger: StoreLedger) -> None:
    fake.token_delay = 0.5  # 6 answer tokens: 3 s a request, still streaming when the stop comes
    run, ended = started(arrivals(ar.Settings(rates=(2.0,), duration_s=5.0, max_open=4)), fake, ledger)
    for _ in range(3):  # the warm-up and two of the level's requests reached the server
        assert fake.received.acquire(timeout=60)
    run.stop()
    assert ended.wait(60) and run.status == STOPPED and run.rows == []  # the level in flight is dropped
    assert len(fake.requests) >= 3
    warm_up, *level = fake.requests
    prompts = sum(usage(request)[0] for request in level)  # the level's prompts, each on the server's side
    assert ledger.spent() >= sum(usage(warm_up)) + prompts > 0


def test_a_stream_cut_after_some_tokens_is_charged_and_a_refused_request_is_not(tmp_path: Path) -> None:
    with FakeOpenAIServer() as fake:
        fake.fault, fake.fault_after = "cut", 1  # the warm-up answers in full, the first round is cut
        cut_ledger = StoreLedger(open_store(str(tmp_path / "cut.sqlite")).db)
        run, ended = started(output((6,)), fake, cut_ledger)
        assert ended.wait(60) and run.status == FAILED and "cut" in run.rows[0].to_dict()["error"]
        warm_up, cut = fake.requests
        cut_prompt = estimated_tokens(cut["body"]["messages"])  # no usage came: the estimate of what was sent
        assert cut_ledger.spent() == sum(usage(warm_up)) + cut_prompt + 3  # 3 of its 6 words arrived
    with FakeOpenAIServer() as fake:
        refused_ledger = StoreLedger(open_store(str(tmp_path / "refused.sqlite")).db)
        run, ended = started(output((6,)), fake, refused_ledger, model="401")
        assert ended.wait(60) and "401" in run.rows[0].to_dict()["error"] and len(fake.requests) == 2
        assert refused_ledger.spent() == 0  # the warm-up and the round were refused before anything
