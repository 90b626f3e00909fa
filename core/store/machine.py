"""The machine a run was measured on, as its saved runs name it: CPU model, cores, system.

No host name and no user name are recorded: a saved run travels in exports and reports. A run
against an API measures the provider, not this machine; the machine is still kept, as the client.
"""

from __future__ import annotations

import os
import platform
import re
import subprocess
from functools import lru_cache
from pathlib import Path
from typing import Any

CPUINFO = Path("/proc/cpuinfo")


def _cpu_model() -> str:
    """``model name`` from /proc/cpuinfo (Linux), ``machdep.cpu.brand_string`` (macOS), else platform's word."""
    try:
        match = re.search(r"^(?:model name|Hardware|Model)\s*:\s*(.+)$", CPUINFO.read_text(), re.MULTILINE)
        if match:
            return " ".join(match.group(1).split())
    except OSError:
        pass
    if platform.system() == "Darwin":
        try:
            out = subprocess.run(["sysctl", "-n", "machdep.cpu.brand_string"], capture_output=True, text=True,
                                 timeout=2, check=False)
            if out.stdout.strip():
                return out.stdout.strip()
        except (OSError, subprocess.SubprocessError):
            pass
    return platform.processor() or platform.machine() or "unknown CPU"


@lru_cache(maxsize=1)
def machine_info() -> dict[str, Any]:
    """This machine, read once per process."""
    return {"cpu": _cpu_model(), "cores": os.cpu_count(), "system": platform.system(), "arch": platform.machine()}


def machine_name(machine: dict[str, Any]) -> str:
    """One short line for lists: ``Intel Xeon … · 2 cores``; a label the machine carries wins."""
    if machine.get("label"):
        return str(machine["label"])
    cores = machine.get("cores")
    cpu = str(machine.get("cpu") or "unknown machine")
    return f"{cpu} · {cores} cores" if cores else cpu
