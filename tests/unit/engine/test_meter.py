"""The CPU meter (`core.engine.meter`) over psutil: the run's `MachineState`, the server found by its port, and a
system without /proc (macOS, Windows, or a Linux whose /proc cannot be read) measured as unmeasured, with a
sentence, never a traceback or a made-up figure."""

from __future__ import annotations

import os
import time

import psutil
import pytest

from core.conclusions import MachineState
from core.engine import meter
from core.engine.meter import CpuMeter, CpuShare, listening_pid, load_average, meter_for
from tests.support.fake_openai import FakeOpenAIServer


def burn(seconds: float) -> None:
    """Use this process's CPU for a while (the meter's 'server' in these tests)."""
    deadline = time.process_time() + seconds
    while time.process_time() < deadline:
        sum(range(1000))


@pytest.fixture
def no_proc(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """/proc absent: psutil reads Linux's process and machine files under ``PROCFS_PATH``; an empty folder
    holds none of them, as on a system without /proc."""
    monkeypatch.setattr(psutil, "PROCFS_PATH", str(tmp_path / "no-proc"))


def test_a_run_on_this_process_gives_a_measured_state_with_every_figure() -> None:
    meter = CpuMeter(os.getpid())
    meter.start()
    burn(0.3)
    state = meter.state()
    assert state.measured and meter.problem == ""
    assert state.server_share is not None and 0 < state.server_share <= 1
    assert state.others_s is not None and state.others_s >= 0
    assert state.cores == psutil.cpu_count() and state.load == pytest.approx(psutil.getloadavg()[0], abs=1.0)
    assert MachineState.from_dict(state.to_dict()) == state  # what the store keeps reads back the same


def test_busy_is_a_small_share_while_others_used_a_real_part_of_the_machine() -> None:
    busy = CpuShare(server_s=1.0, app_s=0.2, busy_s=4.0, capacity_s=8.0, cores=2)
    idle = CpuShare(server_s=1.0, app_s=0.0, busy_s=1.1, capacity_s=8.0, cores=2)
    assert busy.state(1.5) == MachineState(True, 0.25, 3.0, 1.5, 2, True)
    assert not idle.state(None).busy and idle.state(None).load is None


def test_a_server_alone_reads_a_whole_share_not_more() -> None:
    """CI read 1.069: the process's ticks and the machine's, counted apart, can put the server a little over."""
    alone = CpuShare(server_s=0.321, app_s=0.0, busy_s=0.3, capacity_s=0.6, cores=2)
    assert alone.server_share == 1.0 and alone.others_s == 0.0 and not alone.busy


def test_the_server_is_found_by_the_port_it_listens_on() -> None:
    with FakeOpenAIServer() as fake:  # it listens on 127.0.0.1 in this process
        assert listening_pid(fake.base_url) == os.getpid()
        assert meter_for(fake.base_url).pid == os.getpid()
    assert listening_pid("https://api.example.com/v1") is None  # a remote API: not this machine's process
    remote = meter_for("https://api.example.com/v1")
    remote.start()
    assert remote.state() == MachineState() and remote.problem.endswith(".")


def test_without_proc_the_meter_says_why_and_makes_nothing_up(no_proc: None) -> None:
    assert not CpuMeter.measurable()
    meter = CpuMeter(os.getpid())
    meter.start()
    burn(0.05)
    assert meter.state() == MachineState()  # measured False, every figure None, not busy
    assert meter.problem.startswith("The CPU times of this machine or of the server could not be read (")
    assert meter.problem.endswith("so whether it was busy is not known.")


def test_without_proc_the_server_and_the_load_are_not_guessed(no_proc: None, monkeypatch: pytest.MonkeyPatch) -> None:
    with FakeOpenAIServer() as fake:
        assert listening_pid(fake.base_url) is None
    monkeypatch.setattr(psutil, "getloadavg", lambda: (_ for _ in ()).throw(OSError("no /proc/loadavg")))
    assert load_average() is None


def test_on_windows_the_emulated_load_is_not_read_before_it_means_anything(monkeypatch: pytest.MonkeyPatch) -> None:
    """psutil's Windows load average reads 0.0 for its first 5 seconds: None then, the figure after."""
    monkeypatch.setattr(psutil, "WINDOWS", True)
    monkeypatch.setattr(psutil, "getloadavg", lambda: (0.0, 0.0, 0.0))
    monkeypatch.setattr(meter, "_load_since", {})
    assert load_average() is None
    monkeypatch.setattr(meter, "_load_since", {"first": time.monotonic() - meter.WINDOWS_LOAD_WARMUP_S})
    assert load_average() == 0.0
