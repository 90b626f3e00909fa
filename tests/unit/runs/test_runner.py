"""The background run: a run ends the same way however it ends, and always lets go of what it holds."""

from __future__ import annotations

import threading

from core.records import RoundResult
from core.runs.runner import DONE, STOPPED, BackgroundRun, server_lock


def test_a_run_stopped_while_it_waits_for_the_server_still_closes_its_connection():
    closed = threading.Event()
    lock = server_lock("http://127.0.0.1:1/runner-test")
    lock.acquire()  # another session's run holds the server
    try:
        run = BackgroundRun("x", {}, lambda run: iter(()), lock_key="http://127.0.0.1:1/runner-test",
                            on_finish=closed.set).start()
        run.stop()
        run.join(60)
    finally:
        lock.release()
    assert run.status == STOPPED and run.rows == [] and closed.is_set()


def test_a_finished_run_closes_its_connection_after_its_last_row():
    closed = threading.Event()
    rows = [RoundResult("x", 1), RoundResult("x", 2)]
    run = BackgroundRun("x", {}, lambda run: iter(rows), on_finish=closed.set).start()
    run.join(60)
    assert run.status == DONE and run.rows == rows and closed.is_set()
