"""Run an experiment generator in a worker thread, so a UI can poll it, redraw and stop it.

The worker never touches the UI: it appends rows and progress to this object under a lock, and
the UI thread reads `snapshot()`. Runs against one server are serialised with `server_lock`, so
one session's requests never evict another session's KV cache (a llama-server with ``-np 1``
keeps only one prompt's cache).
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from core.export import Record
from core.hosting import Refused

RowSource = Callable[[threading.Event, Callable[[dict[str, Any]], None]], Iterator[Record]]  # rounds or levels

_locks: dict[str, threading.Lock] = {}
_locks_guard = threading.Lock()
_active: set[str] = set()


def active_runs() -> int:
    """Runs started and not yet finished, across every session of this process."""
    with _locks_guard:
        return len(_active)


def server_lock(key: str) -> threading.Lock:
    """The one lock for a server (by URL), shared by every session in this process."""
    with _locks_guard:
        return _locks.setdefault(key, threading.Lock())


WAITING, RUNNING, DONE, STOPPED, FAILED = "waiting", "running", "done", "stopped", "failed"
REDRAW_WAIT_S = 2.0  # the longest a watched run waits for the page to redraw before its next request


@dataclass
class Snapshot:
    rows: list[Record]
    status: str
    progress: dict[str, Any] | None
    error: str
    version: int


@dataclass
class BackgroundRun:
    """One run of one experiment: its settings, its rows so far and its state."""

    experiment: str
    settings: dict[str, Any]
    source: RowSource
    lock_key: str | None = None
    planned_rounds: int = 0
    label: str = ""
    run_id: str = field(default_factory=lambda: uuid.uuid4().hex[:8])
    on_finish: Callable[[], None] | None = None  # called in the worker once the run ends, however it ends

    def __post_init__(self) -> None:
        self.rows: list[Record] = []
        self.status = WAITING
        self.error = ""
        self.progress: dict[str, Any] | None = None
        self.cancel = threading.Event()
        self._changed = threading.Condition()
        self._version = 0
        self._drawn = threading.Event()
        self.watched = False  # set by a page while it polls; then each round waits for its redraw
        self._thread = threading.Thread(target=self._work, name=f"run-{self.experiment}-{self.run_id}", daemon=True)

    # -- worker side -------------------------------------------------------------------------
    def _bump(self) -> None:
        with self._changed:
            self._version += 1
            self._changed.notify_all()

    def _set_progress(self, progress: dict[str, Any]) -> None:
        self.progress = progress
        self._bump()

    def _work(self) -> None:
        lock = server_lock(self.lock_key) if self.lock_key else None
        try:
            if lock is not None:
                while not lock.acquire(timeout=0.2):
                    if self.cancel.is_set():
                        return
            self.status = RUNNING
            self._bump()
            try:
                for row in self.source(self.cancel, self._set_progress):
                    self.progress = None
                    self._drawn.clear()
                    self.rows = [*self.rows, row]
                    self._bump()
                    if self.watched:  # keep the page's chart redraw out of the next request's timing
                        self._drawn.wait(REDRAW_WAIT_S)
            finally:
                if lock is not None:
                    lock.release()
        except Exception as exc:  # noqa: BLE001 - reported to the user, the worker must not die silently
            self.error = f"{type(exc).__name__}: {exc}"
        finally:
            if self.error or any(r.error for r in self.rows):
                self.status = FAILED
            elif self.cancel.is_set():
                self.status = STOPPED
            else:
                self.status = DONE
            with _locks_guard:
                _active.discard(self.run_id)
            if self.on_finish is not None:  # e.g. close the run's connection, also when stopped while waiting
                self.on_finish()
            self._bump()

    @classmethod
    def recorded(cls, experiment: str, settings: dict[str, Any], rows: list[Record], label: str) -> "BackgroundRun":
        """A finished run made from saved rows (recorded sample results), never started."""
        run = cls(experiment, settings, lambda cancel, progress: iter(()), label=label)
        run.rows, run.status = list(rows), DONE
        return run

    # -- UI side -------------------------------------------------------------------------------
    def start(self, max_concurrent: int | None = None) -> "BackgroundRun":
        """Start the worker; with ``max_concurrent``, refuse when that many runs are already going."""
        with _locks_guard:
            if max_concurrent is not None and len(_active) >= max_concurrent:
                raise Refused(f"{len(_active)} runs are in progress on this demo, the most it allows at once. "
                              "Try again in a minute.")
            _active.add(self.run_id)
        self._thread.start()
        return self

    def stop(self) -> None:
        self.cancel.set()
        self._bump()

    @property
    def active(self) -> bool:
        return self.status in (WAITING, RUNNING) and not self.cancel.is_set()

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
        return Snapshot(list(self.rows), self.status, self.progress, self.error, self._version)
