"""The operator's token budgets in the store (`core.store.ledger`), on SQLite and on a real PostgreSQL: processes
racing at the edge of the hourly budget, a restart, a ledger that cannot be read, a server that does not answer."""

from __future__ import annotations

import multiprocessing
from typing import Any

import pytest

from core.engine.server import free_port
from core.hosting import HostedSettings, Refused
from core.runs.runner import DONE, BackgroundRun
from core.store import open_store
from core.store.leases import LeaseLine
from core.store.ledger import StoreLedger

pytestmark = pytest.mark.slow  # processes started and racing; a real PostgreSQL

PROCESSES, TRIES, TOKENS, HOUR_BUDGET = 6, 5, 700, 10_000  # 30 tries of 700 against 10,000: 14 fit
SETTINGS = HostedSettings(hosted=True, max_tokens_per_hour=HOUR_BUDGET, max_tokens_per_visitor=None)


def reserve_many(location: str, visitor: str, start: Any, results: Any) -> None:
    """One replica: its own connection; at the barrier, reserve as fast as it can."""
    ledger = StoreLedger(open_store(location).db)
    won = 0
    start.wait(30)
    for _ in range(TRIES):
        try:
            ledger.reserve(visitor, TOKENS, SETTINGS)
            won += 1
        except Refused as exc:
            assert exc.key == "hour_tokens", exc
    results.put(won)


def test_processes_racing_at_the_edge_of_the_hourly_budget_never_overspend(location: str) -> None:
    open_store(location).close()  # created and migrated before the race
    spawn = multiprocessing.get_context("spawn")
    start, results = spawn.Barrier(PROCESSES), spawn.Queue()
    workers = [spawn.Process(target=reserve_many, args=(location, f"v{i}", start, results))
               for i in range(PROCESSES)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(60)
        assert worker.exitcode == 0, "a racing process failed"
    won = sum(results.get(timeout=60) for _ in workers)
    total = StoreLedger(open_store(location).db).spent()
    assert total <= HOUR_BUDGET, f"{total} tokens reserved; the hourly budget is {HOUR_BUDGET}"
    assert won == HOUR_BUDGET // TOKENS and total == won * TOKENS, f"{won} reservations won, {total} tokens"


def test_a_restart_keeps_what_was_spent_and_settled(location: str) -> None:
    settings = HostedSettings(hosted=True, max_tokens_per_hour=None, max_tokens_per_visitor=1000)
    first = StoreLedger(open_store(location).db)
    spend = first.reserve("a", 800, settings)
    first.settle(spend, 600)  # a stopped run: the rest comes back
    restarted = StoreLedger(open_store(location).db)  # a new process: nothing in memory
    with pytest.raises(Refused, match=r"used about 600 of the 1,000 tokens a visitor may spend"):
        restarted.reserve("a", 500, settings)
    restarted.reserve("a", 400, settings)
    restarted.reserve("b", 1000, settings)


def test_a_ledger_that_cannot_be_read_refuses_the_operators_key(location: str) -> None:
    store = open_store(location)
    ledger = StoreLedger(store.db)
    store.db.execute("DROP TABLE budget_spends")  # the ledger is gone: nothing may be spent on the operator's key
    with pytest.raises(Refused, match="cannot read its token budget") as refused:
        ledger.reserve("a", 10, SETTINGS)
    assert refused.value.key == "ledger_down" and "budget_spends" in str(refused.value)


def test_a_database_that_does_not_answer_refuses_the_operators_key_and_a_visitors_own_key_still_runs() -> None:
    url = f"postgresql://prefill:pw-never-shown@127.0.0.1:{free_port()}/prefill"  # nothing listens there
    store = open_store(url)
    with pytest.raises(Refused) as refused:
        StoreLedger(store.db).reserve("a", 10, SETTINGS)
    assert refused.value.key == "ledger_down" and "127.0.0.1" in str(refused.value)  # the reason names the server
    assert "pw-never-shown" not in str(refused.value)
    own_key = BackgroundRun("x", {}, lambda run: iter(()), visitor="a",
                            line=LeaseLine(store.db, 2.0)).start(max_concurrent=1, per_visitor=1)
    own_key.join(60)  # the line cannot be read either: the run waits in this process's own line, and runs
    assert own_key.status == DONE
