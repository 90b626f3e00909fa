"""Replicas whose clocks are wrong (core/store/ledger.py, leases.py): every time is the database's, so a
replica an hour behind or ahead neither overspends the hourly budget nor takes a live run's place under the cap.
Each replica is its own process whose clock (``time.time``) is set off before anything is imported."""

from __future__ import annotations

import os
import select
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from core.experiments.base import RunContext
from core.runs.runner import DONE, RUNNING, BackgroundRun
from core.store import open_store
from core.store.leases import LeaseLine
from core.store.ledger import StoreLedger
from tests.support import ROOT

pytestmark = pytest.mark.slow  # processes; a real PostgreSQL
HOUR_S, TOKENS, HOUR_BUDGET, LEASE_S = 3600.0, 700, 10_000, 2.0

OFF_CLOCK = textwrap.dedent("""
    import sys, time
    real = time.time
    time.time = lambda: real() + float(sys.argv[2])  # this host's clock is off, before anything reads it
""")
RESERVE = OFF_CLOCK + textwrap.dedent("""
    from core.hosting import HostedSettings, Refused
    from core.store import open_store
    from core.store.ledger import StoreLedger
    ledger = StoreLedger(open_store(sys.argv[1]).db)
    settings = HostedSettings(hosted=True, max_tokens_per_hour=int(sys.argv[3]), max_tokens_per_visitor=None)
    won = 0
    for _ in range(20):
        try:
            ledger.reserve("v" + sys.argv[2], int(sys.argv[4]), settings)
            won += 1
        except Refused:
            pass
    print(won, flush=True)
""")
JOIN = OFF_CLOCK + textwrap.dedent("""
    import threading
    from core.runs.runner import BackgroundRun
    from core.store import open_store
    from core.store.leases import LeaseLine
    started = threading.Event()
    def rows(run):
        started.set()
        return iter(())
    line = LeaseLine(open_store(sys.argv[1]).db, float(sys.argv[3]))
    run = BackgroundRun("x", {}, rows, line=line).start(max_concurrent=1)
    print("took the place" if started.wait(float(sys.argv[3]) * 4) else "waited", flush=True)
    run.stop()
""")


def replica(script: str, url: str, skew_s: float, *args: object) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-c", script, url, str(skew_s), *map(str, args)], cwd=ROOT, text=True,
                            stdout=subprocess.PIPE, env={**os.environ, "PYTHONPATH": str(ROOT)})


def said(process: subprocess.Popen[str]) -> str:
    out, _ = process.communicate(timeout=120)
    assert process.returncode == 0, out
    return out.strip()


def test_replicas_an_hour_apart_never_overspend_the_hourly_budget(postgres_url: str) -> None:
    open_store(postgres_url).close()
    behind = int(said(replica(RESERVE, postgres_url, -HOUR_S, HOUR_BUDGET, TOKENS)))
    assert behind == HOUR_BUDGET // TOKENS  # alone, it fills the budget
    racing = [replica(RESERVE, postgres_url, skew, HOUR_BUDGET, TOKENS) for skew in (0.0, HOUR_S)]
    late = [int(said(process)) for process in racing]
    total = StoreLedger(open_store(postgres_url).db).spent()
    assert late == [0, 0] and total <= HOUR_BUDGET, f"{late} more reserved; {total} tokens of {HOUR_BUDGET}"


def test_a_replica_an_hour_ahead_does_not_take_a_live_runs_place(postgres_url: str) -> None:
    store = open_store(postgres_url)
    release, started = threading.Event(), threading.Event()

    def rows(run: RunContext) -> Iterator[Any]:
        started.set()
        release.wait(120)
        return iter(())

    mine = BackgroundRun("x", {}, rows, line=LeaseLine(store.db, LEASE_S)).start(max_concurrent=1)
    try:
        assert started.wait(60) and mine.snapshot().status == RUNNING
        ahead = replica(JOIN, postgres_url, HOUR_S, LEASE_S)
        assert select.select([ahead.stdout], [], [], 120)[0], "the other replica said nothing"
        assert said(ahead) == "waited"  # two lease times and more: this run's heartbeats kept its place
        assert mine.snapshot().status == RUNNING
    finally:
        release.set()
        mine.join(60)
    assert mine.status == DONE
