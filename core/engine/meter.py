"""Was the machine busy? The CPU time the server got during a run against what every process got.

On 2 cores a browser drawing charts, the app itself and other programs compete with the server,
and a run's tokens/s then say more about them than about the model. `CpuMeter` reads Linux
``/proc/stat`` (all processes) and ``/proc/<pid>/stat`` (the server, and this process) at the start
and end of a run; elsewhere it measures nothing and says so (`measurable`). The server is found
by the port it listens on (`listening_pid`), so a llama-server the user started is measured too.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

PROC = Path("/proc")
BUSY_SHARE = 0.75  # the server had less than this share of the CPU time used during the run
BUSY_OTHERS = 0.10  # ... and the others used at least this share of the machine (an idle machine is not busy)


def _ticks_per_s() -> float:
    return float(os.sysconf("SC_CLK_TCK")) if hasattr(os, "sysconf") else 100.0


def _machine() -> tuple[int, int] | None:
    """(busy, total) jiffies of all CPUs since boot; None without /proc/stat."""
    try:
        first = (PROC / "stat").read_text().splitlines()[0].split()
    except (OSError, IndexError):
        return None
    if first[0] != "cpu":
        return None
    values = [int(v) for v in first[1:9]]  # user nice system idle iowait irq softirq steal
    idle = values[3] + values[4]
    return sum(values) - idle, sum(values)


def _process(pid: int) -> int | None:
    """utime + stime of a process (all its threads) in jiffies; None when it is gone or unreadable."""
    try:
        text = (PROC / str(pid) / "stat").read_text()
    except OSError:
        return None
    fields = text[text.rfind(")") + 2:].split()  # after the command name, which may hold spaces
    return int(fields[11]) + int(fields[12])  # fields 14 and 15 of proc(5)


def _listening_inodes(port: int) -> set[str]:
    inodes = set()
    for table in ("tcp", "tcp6"):
        try:
            rows = (PROC / "net" / table).read_text().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            cols = row.split()
            if len(cols) > 9 and cols[3] == "0A" and int(cols[1].rsplit(":", 1)[1], 16) == port:  # 0A: LISTEN
                inodes.add(cols[9])
    return inodes


def listening_pid(url: str) -> int | None:
    """The process listening on a 127.0.0.1/localhost URL's port (Linux); None for a remote URL or elsewhere."""
    parts = urlsplit(url)
    if parts.hostname not in ("127.0.0.1", "localhost", "::1") or parts.port is None:
        return None
    wanted = {f"socket:[{inode}]" for inode in _listening_inodes(parts.port)}
    if not wanted:
        return None
    for entry in PROC.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if any(os.readlink(fd) in wanted for fd in (entry / "fd").iterdir()):
                return int(entry.name)
        except OSError:  # another user's process, or gone
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
        """The server's share of the CPU time used on the machine."""
        return self.server_s / self.busy_s if self.busy_s > 0 else 1.0

    @property
    def others_s(self) -> float:
        return max(self.busy_s - self.server_s, 0.0)

    @property
    def busy(self) -> bool:
        """Others took a large share: the server had under `BUSY_SHARE` of it while they used a real part."""
        return self.server_share < BUSY_SHARE and self.others_s >= BUSY_OTHERS * self.capacity_s

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "server_share": self.server_share, "busy": self.busy}


class CpuMeter:
    """Start before a run, `stop` after it; `stop` returns None where it cannot measure."""

    def __init__(self, server_pid: int | None) -> None:
        self.pid = server_pid
        self._start: tuple[tuple[int, int], int, int] | None = None

    @staticmethod
    def measurable() -> bool:
        return _machine() is not None and _process(os.getpid()) is not None

    def start(self) -> None:
        machine, me = _machine(), _process(os.getpid())
        server = _process(self.pid) if self.pid else None
        self._start = (machine, server, me) if machine and server is not None and me is not None else None

    def stop(self) -> CpuShare | None:
        if self._start is None or self.pid is None:
            return None
        machine, server, me = _machine(), _process(self.pid), _process(os.getpid())
        if machine is None or server is None or me is None:
            return None
        (busy0, total0), server0, me0 = self._start
        hz, cores = _ticks_per_s(), os.cpu_count() or 1
        return CpuShare(server_s=(server - server0) / hz, app_s=(me - me0) / hz, busy_s=(machine[0] - busy0) / hz,
                        capacity_s=(machine[1] - total0) / hz, cores=cores)
