"""The cap on runs at once and the waiting line in the store: one line for every replica, kept by leases.

A run that waits or runs holds a row in ``run_leases`` (its place: ``arrival``; ``waiting`` or ``running``;
the replica holding it; a heartbeat its replica renews every quarter of the lease). Its place is one past
the last, taken under the line's lock (PostgreSQL: an advisory lock; SQLite: ``BEGIN IMMEDIATE``), so the
place a waiting visitor is shown is global and in arrival order. A waiting run asks again every `POLL_S`
(at once when a run of its own replica ends): first in line with fewer than ``cap`` running, it runs.

Every one of these transactions first removes the leases whose heartbeat is older than the lease time (their
replica is gone: ``kill -9``, a lost host) and marks their runs `CUT` in the runs table, with every round
they wrote, so their places go to the next in line. Every heartbeat and expiry is on the database's clock
(`Database.now_sql`), never a replica's: a replica whose clock is off cannot take a live run's place.

The database unreachable when a run joins: the run waits in this replica's own line (`RunQueue`) instead,
so a visitor's own key still runs (runs on the operator's key were refused by the ledger already).
"""

from __future__ import annotations

import os
import socket
import threading
import time

from core.hosting import Refused
from core.runs.runner import RUNNING, BackgroundRun, RunQueue
from core.store.db import CUT
from core.store.engine import Database, DatabaseError, Transaction

LINE_LOCK = "prefill-lab: line"
POLL_S = 0.5  # how often a waiting run asks for its turn
WAITING = "waiting"


class LeaseLine:
    """`core.runs.runner.Line` on a store's database (table ``run_leases``)."""

    def __init__(self, db: Database, lease_s: float = 20.0, replica: str | None = None) -> None:
        self.db, self.lease_s = db, lease_s
        self.replica = replica or f"{socket.gethostname()}:{os.getpid()}"
        self._changed = threading.Condition()
        self._mine: dict[str, BackgroundRun] = {}  # the leases this replica holds, by run id
        self._positions: dict[str, int] = {}  # a waiting run's place at its last look
        self._local = RunQueue()  # runs that joined while the database was down; and recent run times
        self._offline: set[str] = set()
        self._beating = False

    # -- in one transaction under the line's lock ------------------------------------------------
    def _expire(self, tx: Transaction, now: float) -> None:
        """Free the places of runs whose replica stopped beating; their saved runs are cut."""
        gone = [row[0] for row in tx.execute("SELECT run_id FROM run_leases WHERE heartbeat < ?",
                                             (now - self.lease_s,)).rows]
        if gone:
            marks = ",".join("?" * len(gone))
            tx.execute(f"DELETE FROM run_leases WHERE run_id IN ({marks})", gone)
            tx.execute(f"UPDATE runs SET status = ?, finished_at = ? WHERE status = ? AND id IN ({marks})",
                       (CUT, now, RUNNING, *gone))

    def _counts(self, tx: Transaction) -> tuple[int, int, int]:
        waiting, running, last = tx.execute(
            "SELECT COALESCE(SUM(CASE WHEN state = ? THEN 1 ELSE 0 END), 0), "
            "COALESCE(SUM(CASE WHEN state = ? THEN 1 ELSE 0 END), 0), COALESCE(MAX(arrival), 0) FROM run_leases",
            (WAITING, RUNNING)).one() or (0, 0, 0)
        return int(waiting), int(running), int(last)

    def _take_place(self, tx: Transaction, run: BackgroundRun, now: float) -> int:
        waiting, _, last = self._counts(tx)
        tx.execute("INSERT INTO run_leases (run_id, arrival, visitor, replica, state, heartbeat) "
                   "VALUES (?, ?, ?, ?, ?, ?)", (run.run_id, last + 1, run.visitor, self.replica, WAITING, now))
        return waiting + 1

    # -- the Line -----------------------------------------------------------------------------
    def join(self, run: BackgroundRun, cap: int | None = None, per_visitor: int | None = None,
             max_waiting: int | None = None) -> None:
        """Take the last place in the one line; `Refused` as `RunQueue.join`, counted over every replica."""
        try:
            with self.db.transaction(lock=LINE_LOCK) as tx:
                now = tx.now()
                self._expire(tx, now)
                if per_visitor is not None and run.visitor:
                    mine = int(tx.execute("SELECT COUNT(*) FROM run_leases WHERE visitor = ?",
                                          (run.visitor,)).scalar())
                    if mine >= per_visitor:
                        raise Refused("visitor_runs", runs=mine)
                waiting, running, _ = self._counts(tx)
                if max_waiting is not None and cap is not None and waiting >= max_waiting and running >= cap:
                    raise Refused("line_full", waiting=waiting)
                position = self._take_place(tx, run, now)
        except DatabaseError:
            self._local.join(run, cap, per_visitor, max_waiting)
            with self._changed:
                self._offline.add(run.run_id)
            return
        with self._changed:
            self._mine[run.run_id] = run
            self._positions[run.run_id] = position
        self._start_heartbeat()

    def _turn(self, run: BackgroundRun, cap: int) -> bool:
        """One look: renew this run's lease (a new place at the end if it expired), run it if its turn came."""
        with self.db.transaction(lock=LINE_LOCK) as tx:
            now = tx.now()
            self._expire(tx, now)
            row = tx.execute("SELECT arrival FROM run_leases WHERE run_id = ?", (run.run_id,)).one()
            if row is None:  # the database was away longer than a lease: back in line, at the end
                self._take_place(tx, run, now)
                row = tx.execute("SELECT arrival FROM run_leases WHERE run_id = ?", (run.run_id,)).one()
                assert row is not None
            ahead = int(tx.execute("SELECT COUNT(*) FROM run_leases WHERE state = ? AND arrival < ?",
                                   (WAITING, row[0])).scalar())
            running = int(tx.execute("SELECT COUNT(*) FROM run_leases WHERE state = ?", (RUNNING,)).scalar())
            admitted = ahead == 0 and running < cap
            tx.execute("UPDATE run_leases SET heartbeat = ?, state = ? WHERE run_id = ?",
                       (now, RUNNING if admitted else WAITING, run.run_id))
        with self._changed:
            if admitted:
                self._positions.pop(run.run_id, None)
            else:
                self._positions[run.run_id] = ahead + 1
        return admitted

    def wait_turn(self, run: BackgroundRun, cap: int) -> bool:
        """Block until ``run``'s turn in the one line; False (and out of line) when it is stopped first."""
        if run.run_id in self._offline:
            return self._local.wait_turn(run, cap)
        while not run.cancel.is_set():
            try:
                if self._turn(run, cap):
                    return True
            except DatabaseError:
                pass  # the line cannot be read: the run keeps waiting (its place, if the lease outlives this)
            with self._changed:
                self._changed.wait(POLL_S)
        self.leave(run, None)
        return False

    def leave(self, run: BackgroundRun, seconds: float | None) -> None:
        with self._changed:
            offline = run.run_id in self._offline
            self._offline.discard(run.run_id)
            self._mine.pop(run.run_id, None)
            self._positions.pop(run.run_id, None)
            self._changed.notify_all()
        if offline:
            self._local.leave(run, seconds)
            return
        if seconds is not None:
            self._local.record(seconds)
        try:
            self.db.execute("DELETE FROM run_leases WHERE run_id = ?", (run.run_id,))
        except DatabaseError:
            pass  # the lease expires by itself once no heartbeat renews it

    def position(self, run: BackgroundRun) -> int | None:
        if run.run_id in self._offline:
            return self._local.position(run)
        with self._changed:
            return self._positions.get(run.run_id)

    def expected_wait_s(self, position: int, cap: int) -> float | None:
        """From this replica's recent runs (`RunQueue.expected_wait_s`)."""
        return self._local.expected_wait_s(position, cap)

    def wake(self) -> None:
        with self._changed:
            self._changed.notify_all()
        self._local.wake()

    def waiting(self) -> int:
        return self._counts_now()[0]

    def running(self) -> int:
        return self._counts_now()[1]

    def _counts_now(self) -> tuple[int, int, int]:
        with self.db.transaction(lock=LINE_LOCK) as tx:
            self._expire(tx, tx.now())
            return self._counts(tx)

    # -- the heartbeat ------------------------------------------------------------------------
    def _start_heartbeat(self) -> None:
        with self._changed:
            if self._beating:
                return
            self._beating = True
        threading.Thread(target=self._beat, name="lease-heartbeat", daemon=True).start()

    def _beat(self) -> None:
        """Renew every lease this replica holds, every quarter of the lease time."""
        while True:
            time.sleep(self.lease_s / 4)
            with self._changed:
                ids = list(self._mine)
            if not ids:
                continue
            try:
                self.db.execute(f"UPDATE run_leases SET heartbeat = {self.db.now_sql} "
                                f"WHERE run_id IN ({','.join('?' * len(ids))})", ids)
            except DatabaseError:
                pass  # tried again at the next beat; past the lease time other replicas free these places
