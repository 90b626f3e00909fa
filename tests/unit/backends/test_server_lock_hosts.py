"""One llama-server, one lock, whatever name the URL gives this machine: ``localhost`` and ``127.0.0.1`` took two
locks, so two runs on one server were not serialised."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from core.backends.server_lock import ServerLock, normalize
from tests.support.apptest import ROOT
from tests.unit.backends.test_server_lock import HOLD


@pytest.mark.parametrize("other", ["http://localhost:8083/v1", "http://[::1]:8083/", "http://127.0.0.2:8083"])
def test_loopback_names_of_one_server_are_one_key(other: str) -> None:
    assert normalize(other) == normalize("http://127.0.0.1:8083") == "http://127.0.0.1:8083"


def test_ports_and_remote_hosts_stay_apart() -> None:
    assert normalize("http://localhost:8083") != normalize("http://localhost:8084")
    assert normalize("http://10.0.0.2:8083") != normalize("http://127.0.0.1:8083")
    assert normalize("http://localhost") == normalize("http://127.0.0.1:80")


@pytest.mark.slow
def test_a_run_on_localhost_waits_for_one_on_127_0_0_1(tmp_path: Path) -> None:
    other = subprocess.Popen([sys.executable, "-c", HOLD, "http://localhost:8083/v1", "1.5"], cwd=ROOT,
                             stdout=subprocess.PIPE, text=True,
                             env={"XDG_RUNTIME_DIR": str(tmp_path), "PATH": "", "PYTHONPATH": str(ROOT)})
    try:
        assert other.stdout is not None and other.stdout.readline().strip() == "held"
        mine = ServerLock("http://127.0.0.1:8083", directory=tmp_path / "prefill-lab" / "locks")
        started = time.monotonic()
        assert mine.acquire(threading.Event())
        waited = time.monotonic() - started
        mine.release()
    finally:
        other.wait(60)
    assert waited > 0.8, "the run on 127.0.0.1 waited for the one on localhost"
