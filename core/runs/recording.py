"""What a run's records pass through between the experiment's generator and whoever shows them, in the CLI and
the app alike: the run store, each record written as it arrives (`recorded`). `core.runs.session` stacks it with
the CPU meter and the conclusion.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any, Protocol

from core.experiments.base import RunContext, Source
from core.export import Record


class RecordStore(Protocol):
    """Where a run's records are written: `core.store.RunStore` (which imports this package's statuses)."""

    def add(self, run_id: str, record: Record) -> None:
        """Write one more record of run ``run_id``."""


class RunRecorder(RecordStore, Protocol):
    """A store a whole run is saved in, from its start to how it ended: `core.store.RunStore`."""

    def begin(self, experiment: str, settings: dict[str, Any], *, label: str, owner: str = ...,
              secrets: Iterable[str | None] = ..., run_id: str | None = ...) -> str:
        """Record a new run (``running``) and return its id."""

    def finish(self, run_id: str, status: str, summary: dict[str, Any] | None = ..., finished_at: float | None = ...,
               state: dict[str, Any] | None = ...) -> None:
        """How the run ended, what it concluded (``summary``) and the machine's state during it."""

    def delete(self, run_id: str, owner: str | None = ...) -> bool:
        """Forget a run that never started."""


def recorded(source: Source, store: RecordStore, run_id: str) -> Source:
    """``source``'s records unchanged, each written to the run ``run_id`` (begun by the caller) as it arrives, so
    a run stopped or cut halfway keeps every record measured before."""
    def records(run: RunContext) -> Iterator[Record]:
        for record in source(run):
            store.add(run_id, record)
            yield record

    return records
