"""Runs that last: a store of every run (`db`) on SQLite or PostgreSQL (`engine`, `schema`), its machine
(`machine`), imports and exports (`transfer`).

``open_store()`` opens ``$PREFILL_LAB_DB``: a path (default ``$XDG_DATA_HOME/prefill-lab/runs.sqlite``),
``:memory:`` (nothing kept on disk) or a ``postgresql://`` URL. A file it cannot use is left untouched:
the store then lives in memory and its ``problem`` says why, so a page or the CLI can say it and go on
measuring. A server that does not answer is tried again on each write; what was measured meanwhile
waits in memory (`RunStore.unsaved`).
"""

from __future__ import annotations

from core.store.db import (
    AUTHOR_ENV,
    CUT,
    ENV,
    IMPORTED,
    MEASURED,
    MEMORY,
    REFERENCE,
    RunStore,
    SavedRun,
    StoreError,
    default_location,
)
from core.store.machine import machine_info, machine_name
from core.store.transfer import REFERENCE_ID, ImportRefused, export_run, import_export, read_export, seed_reference

__all__ = ["AUTHOR_ENV", "CUT", "ENV", "IMPORTED", "MEASURED", "MEMORY", "REFERENCE", "REFERENCE_ID", "ImportRefused",
           "RunStore", "SavedRun", "StoreError", "default_location", "export_run", "import_export", "machine_info",
           "machine_name", "open_store", "read_export", "seed_reference"]


def open_store(location: str | None = None) -> RunStore:
    """The store at ``location`` (default `default_location`), else an in-memory one whose ``problem`` says why."""
    where = location or default_location()
    try:
        store = RunStore.open(where)
    except StoreError as exc:
        store = RunStore.memory(problem=f"{exc} Runs are kept in memory until this program stops.")
    def settle() -> None:
        seed_reference(store)
        store.purge_visitors()

    if store.failing:  # a server that cannot be reached yet: when it can
        store.when_up = settle
    else:
        settle()
    return store
