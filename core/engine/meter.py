"""Was the machine busy? The CPU time the server got during a run against what every process got.

On 2 cores a browser drawing charts, the app itself and other programs compete with the server,
and a run's tokens/s then say more about them than about the model. `CpuMeter` reads the CPU times of
the whole machine and of the server (and of this process) at the start and end of a run, and the load
average at the end, through psutil, which reads them on Linux, macOS and Windows alike (the chapter's own
machine is a Mac). The server is found by the port it listens on (`listening_pid`), so a llama-server the
user started is measured too. What cannot be read (another user's process, a system that hides it) is not
made up: the meter's `MachineState` is then unmeasured and `CpuMeter.problem` says why.
"""

from __future__ import annotations

import os
import time
from dataclasses import asdict, dataclass
from typing import Any
from urllib.parse import urlsplit

import psutil

from core.conclusions import MachineState

BUSY_SHARE = 0.75  # the server had less than this share of the CPU time used during the run
BUSY_OTHERS = 0.10  # ... and the others used at least this share of the machine (an idle machine is not busy)
LOCAL_HOSTS = ("127.0.0.1", "localhost", "::1")
READ_ERRORS = (psutil.Error, OSError, NotImplementedError)  # gone, denied, or not on this system
WINDOWS_LOAD_WARMUP_S = 5.0  # psutil's emulated load average reads 0.0 this long after its first call
_load_since: dict[str, float] = {}  # when this process first asked for the load average (Windows)


def _machine() -> tuple[float, float]:
    """(busy, total) CPU seconds of all CPUs since boot."""
    times = psutil.cpu_times()
    idle = times.idle + getattr(times, "iowait", 0.0)
    total = sum(float(value) for value in times)
    guest = getattr(times, "guest", 0.0) + getattr(times, "guest_nice", 0.0)  # Linux counts these in user too
    return total - guest - idle, total - guest


def _process(pid: int) -> float:
    """User and system CPU seconds of a process (all its threads)."""
    times = psutil.Process(pid).cpu_times()
    return float(times.user + times.system)


def load_average() -> float | None:
    """The 1-minute load average; None where it cannot be read, and on Windows, where psutil emulates it and its
    first `WINDOWS_LOAD_WARMUP_S` read 0.0, until then (the meter asks once as a run starts)."""
    try:
        load = float(psutil.getloadavg()[0])
    except READ_ERRORS:
        return None
    if psutil.WINDOWS:
        _load_since.setdefault("first", time.monotonic())
        if time.monotonic() - _load_since["first"] < WINDOWS_LOAD_WARMUP_S:
            return None
    return load


def _listens(connection: Any, port: int) -> bool:
    return bool(connection.status == psutil.CONN_LISTEN and connection.laddr and connection.laddr.port == port)


def listening_pid(url: str) -> int | None:
    """The process listening on a 127.0.0.1/localhost URL's port; None for a remote URL or where it cannot be
    read. The machine-wide table needs no privileges on Linux and Windows; macOS gives it to root only, so
    there each of this user's processes is asked for its own sockets."""
    parts = urlsplit(url)
    if parts.hostname not in LOCAL_HOSTS or parts.port is None:
        return None
    port = parts.port
    try:
        return next((int(c.pid) for c in psutil.net_connections(kind="tcp") if _listens(c, port) and c.pid), None)
    except READ_ERRORS:
        pass
    try:
        processes = list(psutil.process_iter())
    except READ_ERRORS:  # not even the list of processes
        return None
    for process in processes:
        try:
            if any(_listens(c, port) for c in process.net_connections(kind="tcp")):
                return int(process.pid)
        except READ_ERRORS:  # another user's process, or gone
            continue
    return None


@dataclass(frozen=True)
class CpuShare:
    """CPU seconds during one run: the server's, this app's, everyone's, and what the cores could give."""

    server_s: float
    app_s: float
    busy_s: float
    capacity_s: float
    cores: int

    @property
    def server_share(self) -> float:
        """The server's share of the CPU time used on the machine, at most 1: the process's and the machine's
        times are counted in ticks by two clocks, so a server alone on the machine can read a few percent over."""
        return min(self.server_s / self.busy_s, 1.0) if self.busy_s > 0 else 1.0

    @property
    def others_s(self) -> float:
        return max(self.busy_s - self.server_s, 0.0)

    @property
    def busy(self) -> bool:
        """Others took a large share: the server had under `BUSY_SHARE` of it while they used a real part."""
        return self.server_share < BUSY_SHARE and self.others_s >= BUSY_OTHERS * self.capacity_s

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "server_share": self.server_share, "busy": self.busy}

    def state(self, load: float | None) -> MachineState:
        """The run's field: what the meter saw, with the load average at the end."""
        return MachineState(measured=True, server_share=round(self.server_share, 4), others_s=round(self.others_s, 3),
                            load=None if load is None else round(load, 2), cores=self.cores, busy=self.busy)


class CpuMeter:
    """Start before a run, `stop` (or `state`) after it; None (an unmeasured state) where it cannot measure,
    and `problem` says why (no server found, or the system would not tell)."""

    def __init__(self, server_pid: int | None) -> None:
        self.pid = server_pid
        self._start: tuple[tuple[float, float], float, float] | None = None
        self.problem = "" if server_pid else "No local server process was found to measure (a remote API, or " \
            "a server this user cannot see)."

    @classmethod
    def measurable(cls) -> bool:
        meter = cls(os.getpid())
        meter.start()
        return meter._start is not None

    def _read(self) -> tuple[tuple[float, float], float, float] | None:
        if self.pid is None:
            return None
        try:
            return _machine(), _process(self.pid), _process(os.getpid())
        except READ_ERRORS as exc:
            self.problem = (f"The CPU times of this machine or of the server could not be read ({type(exc).__name__}"
                            f"{': ' + str(exc) if str(exc) else ''}), so whether it was busy is not known.")
            return None

    def start(self) -> None:
        load_average()  # Windows: starts psutil's emulated load average, so the run's end can read it
        self._start = self._read()

    def stop(self) -> CpuShare | None:
        if self._start is None:
            return None
        end = self._read()
        if end is None:
            return None
        (busy0, total0), server0, me0 = self._start
        (busy1, total1), server1, me1 = end
        return CpuShare(server_s=server1 - server0, app_s=me1 - me0, busy_s=busy1 - busy0,
                        capacity_s=total1 - total0, cores=psutil.cpu_count() or os.cpu_count() or 1)

    def state(self) -> MachineState:
        """`stop`, as the run's `MachineState` (unmeasured, no figure made up, where it cannot measure)."""
        share = self.stop()
        return share.state(load_average()) if share else MachineState()


def meter_for(url: str) -> CpuMeter:
    """A meter of the server listening at ``url`` (none found for a remote API: an unmeasured state)."""
    return CpuMeter(listening_pid(url))
