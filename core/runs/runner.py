"""Run an experiment generator in a worker thread, so a UI can poll it, redraw and stop it.

The worker never touches the UI: it appends rows and progress to this object under a lock, and
the UI thread reads `snapshot()`. Three things decide when a run starts:

- the hosted demo's cap on runs at once (`RunQueue`): past it, runs wait in arrival order and start
  by themselves, each knowing its place in line and about how long it will wait;
- a llama-server's lock (`core.backends.server_lock`, across processes): one session's requests never
  evict another session's KV cache (a llama-server with ``-np 1`` keeps only one prompt's cache), and
  a CLI run never mixes its timings with the app's. APIs are not locked;
- Stop, or the page that started the run going away for longer than a grace period (a closed tab
  must not go on spending the operator's key): both cut the run's open connection at once.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from core.backends.connect import Connection
from core.backends.server_lock import ServerLock
from core.conclusions import Conclusion, MachineState
from core.experiments.base import RunContext, Source
from core.export import Record
from core.hosting import Refused


def server_lock(key: str) -> ServerLock:
    """The lock for a server (by URL), shared by every session and every process of this user."""
    return ServerLock(key)


class Line(Protocol):
    """The cap on runs at once and the line of runs waiting for a place: `RunQueue` in one process, or
    `core.store.leases.LeaseLine` in the store, one line for every replica."""

    def join(self, run: BackgroundRun, cap: int | None = None, per_visitor: int | None = None,
             max_waiting: int | None = None) -> None: ...

    def wait_turn(self, run: BackgroundRun, cap: int) -> bool: ...

    def leave(self, run: BackgroundRun, seconds: float | None) -> None: ...

    def position(self, run: BackgroundRun) -> int | None: ...

    def expected_wait_s(self, position: int, cap: int) -> float | None: ...

    def wake(self) -> None: ...


class RunQueue:
    """First come, first served: at most ``cap`` runs at once, the others wait in arrival order."""

    RECENT = 20  # run durations kept to estimate a wait

    def __init__(self) -> None:
        self._changed = threading.Condition()
        self._waiting: deque[BackgroundRun] = deque()
        self._running: dict[str, str] = {}  # run id -> visitor
        self._durations: deque[float] = deque(maxlen=self.RECENT)

    def join(self, run: BackgroundRun, cap: int | None = None, per_visitor: int | None = None,
             max_waiting: int | None = None) -> None:
        """Put ``run`` at the end of the line; `Refused` when its visitor already has ``per_visitor`` runs going or
        waiting, or ``max_waiting`` runs wait while ``cap`` run."""
        with self._changed:
            if per_visitor is not None and run.visitor:
                mine = sum(1 for r in self._waiting if r.visitor == run.visitor) + \
                    sum(1 for v in self._running.values() if v == run.visitor)
                if mine >= per_visitor:
                    raise Refused("visitor_runs", runs=mine)
            if max_waiting is not None and cap is not None and len(self._waiting) >= max_waiting \
                    and len(self._running) >= cap:
                raise Refused("line_full", waiting=len(self._waiting))
            self._waiting.append(run)
            self._changed.notify_all()

    def wait_turn(self, run: BackgroundRun, cap: int) -> bool:
        """Block until ``run`` is first in line and a place is free; False (and out of line) when stopped first."""
        with self._changed:
            while not (self._waiting and self._waiting[0] is run and len(self._running) < cap):
                if run.cancel.is_set():
                    self._waiting.remove(run)
                    self._changed.notify_all()
                    return False
                self._changed.wait(0.2)
            self._waiting.popleft()
            self._running[run.run_id] = run.visitor
            self._changed.notify_all()
            return True

    def leave(self, run: BackgroundRun, seconds: float | None) -> None:
        with self._changed:
            if run.run_id in self._running:
                del self._running[run.run_id]
                if seconds is not None:
                    self._durations.append(seconds)
            elif run in self._waiting:
                self._waiting.remove(run)
            self._changed.notify_all()

    def record(self, seconds: float) -> None:
        """A run's time, for `expected_wait_s` (a `LeaseLine` keeps its replica's here)."""
        with self._changed:
            self._durations.append(seconds)

    def waiting(self) -> int:
        with self._changed:
            return len(self._waiting)

    def running(self) -> int:
        with self._changed:
            return len(self._running)

    def position(self, run: BackgroundRun) -> int | None:
        """1 for the next run to start; None when ``run`` is not waiting."""
        with self._changed:
            return next((i + 1 for i, r in enumerate(self._waiting) if r is run), None)

    def expected_wait_s(self, position: int, cap: int) -> float | None:
        """About how long the run at ``position`` waits: the runs ahead of it and the running ones share
        ``cap`` places, each taking a recent run's median time. None before any run has finished."""
        with self._changed:
            if not self._durations:
                return None
            typical = sorted(self._durations)[len(self._durations) // 2]
        return typical * ((position - 1) // max(cap, 1) + 1)

    def wake(self) -> None:
        with self._changed:
            self._changed.notify_all()


QUEUE = RunQueue()
_started: dict[str, BackgroundRun] = {}  # runs started and not yet finished, in this process
_started_guard = threading.Lock()


def active_runs() -> int:
    """Runs started and not yet finished (waiting in line included), across every session of this process."""
    with _started_guard:
        return len(_started)


QUEUED, WAITING, RUNNING, DONE, STOPPED, FAILED = "queued", "waiting", "running", "done", "stopped", "failed"
REDRAW_WAIT_S = 2.0  # the longest a watched run waits for the page to redraw before its next request
WATCH_S = 0.25  # how often a run asks whether its page is still there


@dataclass
class Snapshot:
    rows: list[Record]
    status: str
    progress: dict[str, Any] | None
    error: str
    version: int
    queue_position: int | None = None  # 1 = next to start; None unless QUEUED
    expected_wait_s: float | None = None  # for a queued run, when recent runs say
    warning: str = ""  # e.g. another client is using the same llama-server


@dataclass
class BackgroundRun:
    """One run of one experiment: its settings, its rows so far and its state.

    ``on_stop`` cuts the run's connection (`Connection.abort`), so Stop ends a request waiting on a silent
    server now; ``page_alive`` says whether the page that started it is still connected: gone for
    ``grace_s`` seconds, the run is stopped (``ended_because = "page closed"``). ``busy_slots`` tells,
    once the server lock is held, how many of the server's slots another client is using.
    """

    experiment: str
    settings: dict[str, Any]
    source: Source
    connection: Connection | None = None  # where the source's requests go (`RunContext`)
    lock_key: str | None = None
    planned_rounds: int = 0
    label: str = ""
    run_id: str = field(default_factory=lambda: uuid.uuid4().hex[:8])
    on_finish: Callable[[], None] | None = None  # called in the worker once the run ends, however it ends
    on_stop: Callable[[], None] | None = None
    page_alive: Callable[[], bool] | None = None
    grace_s: float = 10.0
    visitor: str = ""  # who started it, for the per-visitor limit
    busy_slots: Callable[[], int | None] | None = None
    line: Line | None = None  # where it waits for a place under the cap: this process's `QUEUE` unless given

    def __post_init__(self) -> None:
        self.rows: list[Record] = []
        self.status = WAITING
        self.error = ""
        self.warning = ""
        self.ended_because = ""  # "stopped", "page closed" or "" (it ran to its end)
        self.progress: dict[str, Any] | None = None
        self.cancel = threading.Event()
        self._changed = threading.Condition()
        self._version = 0
        self._drawn = threading.Event()
        self._cap: int | None = None
        self.seconds: float | None = None  # time spent running, once it ended
        self.watched = False  # set by a page while it polls; then each round waits for its redraw
        self.state = MachineState()  # the machine during the run, once its records end (`core.runs.session`)
        self.conclusion: Conclusion | None = None  # what it showed, computed once as its records end
        self._thread = threading.Thread(target=self._work, name=f"run-{self.experiment}-{self.run_id}", daemon=True)

    @property
    def _line(self) -> Line:
        return self.line or QUEUE

    # -- worker side -------------------------------------------------------------------------
    def _bump(self) -> None:
        with self._changed:
            self._version += 1
            self._changed.notify_all()

    def _set_progress(self, progress: dict[str, Any]) -> None:
        self.progress = progress
        self._bump()

    def _heard_holder(self, holder: str) -> None:
        self.warning = f"Waiting for another run on this server ({holder or 'another process'})."
        self._bump()

    def _work(self) -> None:
        lock = server_lock(self.lock_key) if self.lock_key else None
        held = False
        started_at: float | None = None
        try:
            if self._cap is not None and not self._line.wait_turn(self, self._cap):
                return
            self.status = WAITING
            self._bump()
            if lock is not None:
                if not lock.acquire(self.cancel, self._heard_holder):
                    return
                held = True
                self.warning = ""
                busy = self.busy_slots() if self.busy_slots is not None else None
                if busy:
                    self.warning = (f"Another client is using this server ({busy} slot(s) busy before this run "
                                    "started): its requests share the server with this run's, so timings may be "
                                    "slower than the server alone.")
            started_at = time.monotonic()
            self.status = RUNNING
            self._bump()
            for row in self.source(RunContext(self.connection, self.cancel, self._set_progress)):
                self.progress = None
                self._drawn.clear()
                self.rows = [*self.rows, row]
                self._bump()
                if self.watched:  # keep the page's chart redraw out of the next request's timing
                    self._drawn.wait(REDRAW_WAIT_S)
        except Exception as exc:  # noqa: BLE001 - reported to the user, the worker must not die silently
            if not self.cancel.is_set():  # after a Stop, a request cut short is the stop, not a fault
                self.error = f"{type(exc).__name__}: {exc}"
        finally:
            if held and lock is not None:
                lock.release()
            self.seconds = None if started_at is None else time.monotonic() - started_at
            if any(r.error for r in self.rows):
                self.status = FAILED
            elif self.cancel.is_set():
                self.status = STOPPED
            elif self.error:
                self.status = FAILED
            else:
                self.status = DONE
            if self._cap is not None:
                self._line.leave(self, self.seconds)
            with _started_guard:
                _started.pop(self.run_id, None)
            if self.on_finish is not None:  # e.g. close the connection, settle the budget; also when stopped early
                self.on_finish()
            self._bump()

    def _watch_page(self) -> None:
        """Stop the run once its page has been gone for ``grace_s`` (a reconnect within it keeps it)."""
        assert self.page_alive is not None
        gone_since: float | None = None
        while self._thread.is_alive() and not self.cancel.is_set():
            if self.page_alive():
                gone_since = None
            elif gone_since is None:
                gone_since = time.monotonic()
            elif time.monotonic() - gone_since >= self.grace_s:
                self.stop("page closed")
                return
            self._thread.join(WATCH_S)

    @classmethod
    def recorded(cls, experiment: str, settings: dict[str, Any], rows: list[Record], label: str) -> BackgroundRun:
        """A finished run made from saved rows (recorded sample results), never started."""
        run = cls(experiment, settings, lambda context: iter(()), label=label)
        run.rows, run.status = list(rows), DONE
        return run

    # -- UI side -------------------------------------------------------------------------------
    def start(self, max_concurrent: int | None = None, per_visitor: int | None = None,
              max_waiting: int | None = None) -> BackgroundRun:
        """Start the worker. With ``max_concurrent``, the run waits in line (`QUEUE`) while that many run,
        `Refused` when ``max_waiting`` runs already wait; with ``per_visitor``, `Refused` when its visitor
        already has that many runs going or waiting."""
        with _started_guard:
            if max_concurrent is not None:
                self.status = QUEUED
                self._line.join(self, max_concurrent, per_visitor, max_waiting)
                self._cap = max_concurrent
            elif per_visitor is not None and self.visitor:
                mine = sum(1 for r in _started.values() if r.visitor == self.visitor)
                if mine >= per_visitor:
                    raise Refused("visitor_runs", runs=mine)
            _started[self.run_id] = self
        self._thread.start()
        if self.page_alive is not None:
            threading.Thread(target=self._watch_page, name=f"watch-{self.run_id}", daemon=True).start()
        return self

    def stop(self, because: str = "stopped") -> None:
        """Stop now: the open request is cut (``on_stop``), a queued run leaves the line."""
        if not self.cancel.is_set():
            self.ended_because = because
        self.cancel.set()
        if self.on_stop is not None:
            self.on_stop()
        self._line.wake()
        self._bump()

    @property
    def active(self) -> bool:
        return self.status in (QUEUED, WAITING, RUNNING) and not self.cancel.is_set()

    def join(self, timeout: float | None = None) -> None:
        self._thread.join(timeout)

    def drawn(self) -> None:
        """The page has redrawn the latest rows: the next request may start."""
        self._drawn.set()

    def wait_for_change(self, seen_version: int, timeout: float) -> None:
        """Block up to ``timeout`` seconds until something newer than ``seen_version`` happens."""
        with self._changed:
            self._changed.wait_for(lambda: self._version != seen_version, timeout)

    def snapshot(self) -> Snapshot:
        position = self._line.position(self) if self.status == QUEUED else None
        wait = self._line.expected_wait_s(position, self._cap or 1) if position is not None else None
        return Snapshot(list(self.rows), self.status, self.progress, self.error, self._version, position, wait,
                        self.warning)
