"""The cap on runs at once and the waiting line in the store (`core.store.leases`), on SQLite and on a real
PostgreSQL: one line over several replicas, in arrival order, and a replica killed with kill -9."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from core.experiments.base import RunContext
from core.hosting import Refused
from core.runs.runner import DONE, QUEUED, RUNNING, BackgroundRun
from core.store import CUT, open_store
from core.store.leases import LeaseLine
from tests.support import ROOT

pytestmark = pytest.mark.slow  # leases expire in seconds; a process killed
LEASE_S = 2.0


class Gate:
    """Sources that hold until released."""

    def __init__(self) -> None:
        self.release = threading.Event()

    def source(self) -> Callable[[RunContext], Iterator[Any]]:
        def rows(run: RunContext) -> Iterator[Any]:
            self.release.wait(30)
            return iter(())
        return rows


def wait_until(check: Callable[[], bool], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def test_two_replicas_share_one_cap_and_one_line_in_arrival_order(location: str) -> None:
    a, b = (LeaseLine(open_store(location).db, LEASE_S, replica=name) for name in ("a", "b"))
    gate = Gate()
    runs = []
    for i in range(6):  # arriving in turn on the two replicas
        runs.append(BackgroundRun("x", {}, gate.source(), visitor=f"v{i}", line=(a, b)[i % 2]).start(
            max_concurrent=2, per_visitor=1, max_waiting=4))
        wait_until(lambda: runs[-1].snapshot().status in (RUNNING, QUEUED))
    try:
        wait_until(lambda: [r.snapshot().queue_position for r in runs] == [None, None, 1, 2, 3, 4])
        assert [r.snapshot().status for r in runs[:2]] == [RUNNING, RUNNING]
        with pytest.raises(Refused) as busy:  # the same visitor on the other replica
            BackgroundRun("x", {}, gate.source(), visitor="v0", line=b).start(max_concurrent=2, per_visitor=1)
        assert busy.value.key == "visitor_runs"
        with pytest.raises(Refused) as full:
            BackgroundRun("x", {}, gate.source(), visitor="late", line=a).start(max_concurrent=2, max_waiting=4)
        assert full.value.key == "line_full"
        runs[3].stop()  # a waiting run leaves: the ones behind it move up
        wait_until(lambda: [r.snapshot().queue_position for r in runs[4:]] == [2, 3])
    finally:
        gate.release.set()
        for run in runs:
            run.join(20)
    assert [r.status for r in runs] == [DONE, DONE, DONE, "stopped", DONE, DONE]
    assert a.running() == 0 and a.waiting() == 0


REPLICA = textwrap.dedent("""
    import sys, time
    from core.experiments.prefix_cache import ID
    from core.runs.runner import BackgroundRun
    from core.records import RoundResult
    from core.store import open_store
    from core.store.leases import LeaseLine

    store = open_store(sys.argv[1])
    run_id = store.begin(ID, {}, label="cut by kill -9", owner="visitor-a")
    def rounds(run):
        for i in (1, 2):
            row = RoundResult(ID, i, strategy="append_only", prompt_tokens=1000 + i, ttft_ms=10.0 * i)
            store.add(run_id, row)
            yield row
        print("running", run_id, flush=True)
        time.sleep(600)
    BackgroundRun(ID, {}, rounds, run_id=run_id, line=LeaseLine(store.db, float(sys.argv[2]))).start(
        max_concurrent=1).join()
""")


def test_a_replica_killed_mid_run_frees_its_place_and_its_run_is_listed_as_cut(location: str) -> None:
    open_store(location).close()
    replica = subprocess.Popen([sys.executable, "-c", REPLICA, location, str(LEASE_S)], cwd=ROOT,
                               stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        assert select.select([replica.stdout], [], [], 60)[0], "the other replica's run did not start"
        word, cut_id = replica.stdout.readline().split()  # type: ignore[union-attr]
        assert word == "running"
        store = open_store(location)
        line = LeaseLine(store.db, LEASE_S)
        started = threading.Event()

        def source(run: RunContext) -> Iterator[Any]:
            started.set()
            return iter(())

        mine = BackgroundRun("x", {}, source, line=line).start(max_concurrent=1)
        time.sleep(LEASE_S + 1)  # the other replica beats: its run keeps the one place
        assert mine.snapshot().status == QUEUED and mine.snapshot().queue_position == 1
        os.kill(replica.pid, signal.SIGKILL)
        killed = time.monotonic()
        assert started.wait(LEASE_S + 5), "the waiting run did not start after the killed replica's lease expired"
        assert time.monotonic() - killed >= LEASE_S * 0.5
        mine.join(60)
        assert mine.status == DONE
    finally:
        replica.kill()
        replica.wait(60)
    assert store.db.execute("SELECT status FROM runs WHERE id = ?", (cut_id,)).scalar() == CUT
    cut = store.get(cut_id)
    assert cut is not None and cut.status == CUT and cut.rounds == 2
    assert [r.prompt_tokens for r in store.records(cut_id)] == [1001, 1002]
