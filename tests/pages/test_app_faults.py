"""The fault matrix through the app, and the embedded server killed during a run."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

import pytest

from tests.support.apptest import KEY, api_state, app, rendered
from tests.support.fake_openai import SLOW_SECONDS


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.mark.slow
@pytest.mark.parametrize("fault,needle", [
    ("401", "API key was rejected"), ("404", "does not exist"), ("429", "retry after 7 s"), ("500", "server failed"),
    ("cut", "cut after"), ("garbage", "Malformed JSON"), ("no-stream", "cannot stream"), ("slow", "read timeout"),
])
def test_fault_after_a_good_round_keeps_it(fake_api, monkeypatch, fault, needle):
    monkeypatch.setattr("core.backends.base.DEFAULT_TIMEOUT", __import__("httpx").Timeout(5, read=SLOW_SECONDS / 3))
    fake_api.fault, fake_api.fault_after = fault, 2  # the warm-up and round 1 succeed
    threads, fds = threading.active_count(), open_fds()
    at = app(**api_state(fake_api))
    at.switch_page("app_pages/output.py").run()
    at.multiselect(key="output_lengths").set_value([8, 16, 32]).run()
    at.button(key="run_output").click().run()
    assert not at.exception
    table = at.dataframe[0].value
    assert len(table) == 2 and table["error"].iloc[0] == "" and needle in table["error"].iloc[1]
    assert any(needle in e.value and "round 2" in e.value for e in at.error)
    assert KEY not in rendered(at)
    deadline = time.monotonic() + SLOW_SECONDS + 5  # the fake server's handler may still be winding down
    while time.monotonic() < deadline and (threading.active_count() > threads + 1 or open_fds() > fds + 2):
        time.sleep(0.05)
    assert threading.active_count() <= threads + 1, "no worker or client thread is left behind"
    assert open_fds() <= fds + 2, "no socket is left open"


@pytest.mark.slow
@pytest.mark.parametrize("quirk", ["keepalive", "reasoning", "no-usage"])
def test_quirks_are_measured_normally(fake_api, quirk):
    fake_api.fault, fake_api.fault_after = quirk, 0
    at = app(**api_state(fake_api))
    at.switch_page("app_pages/output.py").run()
    at.multiselect(key="output_lengths").set_value([8, 16]).run()
    at.button(key="run_output").click().run()
    table = at.dataframe[0].value
    assert list(table["error"]) == ["", ""] and table["ttft_ms"].notna().all()
    if quirk == "reasoning":  # thinking starts before the first visible token, and the table says when
        assert (table["first_reasoning_ms"] < table["ttft_ms"]).all()


def embedded_server_pid() -> int:
    """The app's embedded llama-server: our child started with the default 8192-token context."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().split(b"\0")
            stat = (entry / "stat").read_text().split()
        except OSError:
            continue
        if cmdline and cmdline[0].endswith(b"llama-server") and b"8192" in cmdline and int(stat[3]) == os.getpid():
            return int(entry.name)
    raise AssertionError("no embedded llama-server found")


@pytest.mark.llama
def test_embedded_server_killed_mid_run_then_restarted():
    at = app()
    at.switch_page("app_pages/output.py").run()
    at.multiselect(key="output_lengths").set_value([256, 512, 1024]).run()
    pid = embedded_server_pid()
    killer = threading.Timer(4.0, lambda: os.killpg(pid, signal.SIGKILL))
    killer.start()
    at.button(key="run_output").click().run()
    killer.join()
    errors = [e.value for e in at.error]
    assert any("The run stopped at a failing round" in e for e in errors), errors
    at.run()
    assert any("Not running" in e.value for e in at.sidebar.error)
    assert "exit code" in at.sidebar.code[0].value
    at.sidebar.button(key="restart_engine").click().run()
    assert any("Healthy" in s.value for s in at.sidebar.success)
    at.multiselect(key="output_lengths").set_value([8]).run()
    at.button(key="run_output").click().run()
    assert any("Done: 1 rounds" in s.value for s in at.success)
