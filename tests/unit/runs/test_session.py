"""One run through one call (`core.runs.session.start_run`): admitted, saved record by record, metered, concluded
once as its records end, and settled; a run refused at any step leaves nothing behind. Against the fake
OpenAI-compatible server on 127.0.0.1 (a real HTTP server, in this process: the meter's server)."""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Sequence
from typing import Any

import pytest

from core.backends.connect import Connection, Target
from core.conclusions import SHOWN, Conclusion, Finding, MachineState
from core.experiments import EXPERIMENTS
from core.experiments.base import Plan, Source
from core.experiments.output_length import ID as OUTPUT
from core.experiments.output_length import Settings, rounds
from core.hosting import HostedSettings, TokenLedger
from core.runs.runner import DONE, STOPPED, RunQueue
from core.runs.session import CONNECT, NOTHING, REFUSED, SETTINGS, Events, NotStarted, RunOrder, Visit, start_run
from core.store import RunStore
from tests.support.fake_openai import FakeOpenAIServer


def output_order(lengths: tuple[int, ...] = (4, 8)) -> RunOrder:
    settings = Settings(lengths=lengths)
    return RunOrder(OUTPUT, {"lengths": list(lengths)}, Plan(len(lengths), 100),
                 lambda conn: lambda run: rounds(run, settings))


@pytest.fixture
def fake() -> FakeOpenAIServer:
    with FakeOpenAIServer() as server:
        yield server


@pytest.fixture
def concluded(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, MachineState | None]]:
    """Experiment 2 with a ``conclude`` that says how many records it got, and notes each call."""
    calls: list[tuple[int, MachineState | None]] = []

    def conclude(records: Sequence[Any], state: MachineState | None) -> Conclusion:
        calls.append((len(records), state))
        return Conclusion(OUTPUT, SHOWN, Finding("rounds", {"n": len(records)}))

    monkeypatch.setitem(EXPERIMENTS, OUTPUT, dataclasses.replace(EXPERIMENTS[OUTPUT], conclude=conclude))
    return calls


def target(fake: FakeOpenAIServer) -> Target:
    return Target("api", fake.base_url, "ok", api_key="sk-session-test")


def test_a_run_is_saved_metered_concluded_once_and_settled(fake: FakeOpenAIServer,
                                                            concluded: list[tuple[int, MachineState | None]]) -> None:
    store, heard, ended = RunStore.memory(), [], threading.Event()
    run = start_run(output_order(), target(fake), label=lambda conn: f"{conn.name} run", store=store,
                    events=Events(on_record=lambda run, record: heard.append(record), on_end=lambda run: ended.set()))
    assert ended.wait(60)
    assert run.status == DONE and len(run.rows) == 2 and heard == run.rows
    assert concluded == [(2, run.state)]  # once, with the meter's state of this very run
    assert run.state.measured and run.state.cores and run.state.server_share is not None  # this process serves
    saved = store.get(run.run_id)
    assert saved is not None and saved.status == DONE and saved.label == "api run" and saved.rounds == 2
    assert saved.state == run.state and saved.conclusion == run.conclusion == Conclusion(
        OUTPUT, SHOWN, Finding("rounds", {"n": 2}))
    assert "sk-session-test" not in str(saved.settings) and saved.settings["lengths"] == [4, 8]


def test_a_stopped_run_keeps_its_records_state_and_conclusion(fake: FakeOpenAIServer,
                                                             concluded: list[tuple[int, MachineState | None]]) -> None:
    fake.token_delay = 0.05  # 64 tokens: about 3 s, time to stop it
    store, first, ended = RunStore.memory(), threading.Event(), threading.Event()
    run = start_run(output_order((2, 64, 64)), target(fake), label=lambda conn: "stopped", store=store,
                    events=Events(on_record=lambda run, record: first.set(), on_end=lambda run: ended.set()))
    assert first.wait(60)
    run.stop()
    assert ended.wait(60)
    saved = store.get(run.run_id)
    assert saved is not None and saved.status == STOPPED and saved.rounds == len(run.rows) >= 1
    assert concluded == [(len(run.rows), run.state)] and saved.conclusion == run.conclusion


def refused(order: RunOrder, where: Target, visit: Visit | None = None) -> tuple[NotStarted, RunStore]:
    store = RunStore.memory()
    with pytest.raises(NotStarted) as caught:
        start_run(order, where, label=lambda conn: "refused", store=store, visit=visit)
    assert [run for run in store.runs() if run.label == "refused"] == []  # nothing saved
    return caught.value, store


def test_nothing_planned_is_not_a_run(fake: FakeOpenAIServer) -> None:
    assert refused(dataclasses.replace(output_order(()), plan=Plan(0, 0)), target(fake))[0].reason == NOTHING


def test_settings_that_cannot_run_give_the_reservation_back(fake: FakeOpenAIServer) -> None:
    def cannot(conn: Connection) -> Source:
        raise ValueError("A 9,000-token prompt does not fit this server's context.")

    budgets = TokenLedger()
    hosted = HostedSettings(hosted=True, allowed_base_urls=(fake.base_url,), allow_loopback=True,
                            max_tokens_per_visitor=150)
    visit = Visit(hosted, budgets, visitor="v1", whose_key="OPERATOR_KEY")
    exc, _ = refused(dataclasses.replace(output_order(), make_source=cannot), target(fake), visit)
    assert exc.reason == SETTINGS and "does not fit" in str(exc.cause)
    no_place = dataclasses.replace(hosted, max_concurrent_runs=0, max_waiting_runs=0)  # the line is full
    exc, _ = refused(output_order(), target(fake), dataclasses.replace(visit, hosted=no_place, line=RunQueue()))
    assert exc.reason == REFUSED and getattr(exc.cause, "key", "") == "line_full"  # the run it began is forgotten
    store, ended = RunStore.memory(), threading.Event()  # each reservation went back: 100 of 150 fits again
    run = start_run(output_order(), target(fake), label=lambda conn: "fits", store=store, visit=visit,
                    events=Events(on_end=lambda run: ended.set()))
    assert ended.wait(60) and run.status == DONE


def test_over_the_demos_limits_or_an_unreachable_server_is_refused_before_anything_is_saved(
        fake: FakeOpenAIServer) -> None:
    hosted = HostedSettings(hosted=True, allowed_base_urls=(fake.base_url,), allow_loopback=True, max_rounds=1)
    exc, _ = refused(output_order(), target(fake), Visit(hosted))
    assert exc.reason == REFUSED and exc.cause is not None and getattr(exc.cause, "key", "") == "rounds"
    exc, _ = refused(output_order(), Target("llama", "http://127.0.0.1:9"))
    assert exc.reason == CONNECT and str(exc.cause)
