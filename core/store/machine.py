"""The machine a run was measured on, as its saved runs name it: CPU model, cores, system, its roofs.

No host name and no user name are recorded: a saved run travels in exports and reports. A run
against an API measures the provider, not this machine; the machine is still kept, as the client.
"""

from __future__ import annotations

import platform
from functools import lru_cache
from typing import Any

from core.engine.cpu import cores, cpu_model
from core.roofline import peaks


@lru_cache(maxsize=1)
def _identity() -> dict[str, Any]:
    return {"cpu": cpu_model(), "cores": cores(), "system": platform.system(), "arch": platform.machine()}


def machine_info() -> dict[str, Any]:
    """This machine (read once per process), with its roofs when the probe has measured them here."""
    roof = peaks.cached()
    return {**_identity(), **({"roof": roof.to_dict()} if roof else {})}


def machine_name(machine: dict[str, Any]) -> str:
    """One short line for lists: ``Intel Xeon … · 2 cores``; a label the machine carries wins."""
    if machine.get("label"):
        return str(machine["label"])
    cores = machine.get("cores")
    cpu = str(machine.get("cpu") or "unknown machine")
    return f"{cpu} · {cores} cores" if cores else cpu
