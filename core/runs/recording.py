"""What a run's records pass through between the experiment's generator and whoever shows them, in the CLI and
the app alike: the run store, each record written as it arrives (`recorded`), and the CPU meter (`metered`).

Each takes a `Source` and gives a `Source`, so they stack in any order and a caller starts the run the same way
with or without them.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Protocol

from core.engine.meter import CpuMeter, listening_pid
from core.experiments.base import RunContext, Source
from core.export import Record


class RecordStore(Protocol):
    """Where a run's records are written: `core.store.RunStore` (which imports this package's statuses)."""

    def add(self, run_id: str, record: Record) -> None:
        """Write one more record of run ``run_id``."""


def recorded(source: Source, store: RecordStore, run_id: str) -> Source:
    """``source``'s records unchanged, each written to the run ``run_id`` (begun by the caller) as it arrives, so
    a run stopped or cut halfway keeps every record measured before."""
    def records(run: RunContext) -> Iterator[Record]:
        for record in source(run):
            store.add(run_id, record)
            yield record

    return records


def metered(source: Source, url: str, into: dict[str, Any]) -> Source:
    """``source``'s records unchanged; once they end, ``into["cpu"]`` holds the CPU share the server listening at
    ``url`` got meanwhile (`core.engine.meter.CpuShare.to_dict`), or None where it cannot be measured (a remote
    API, not Linux)."""
    pid = listening_pid(url)

    def records(run: RunContext) -> Iterator[Record]:
        meter = CpuMeter(pid)
        meter.start()
        try:
            yield from source(run)
        finally:
            share = meter.stop()
            into["cpu"] = share.to_dict() if share else None

    return records
