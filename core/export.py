"""CSV and JSON exports of a run: its settings (never a key, not even in a URL or an error) and one record per
round or level.

A JSON export is ``{"settings": …, "rounds": […], "summary": …}``, with an experiment's records
under its key (`core.experiments.Experiment.records`: ``rounds``, or ``levels`` for
experiment 4). Exports written with older spellings still load (`core.records.renamed`).
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Mapping, Sequence
from dataclasses import fields
from typing import Any, Protocol, Self, TypeVar

from core.records import RoundResult, renamed
from core.secrets import scrubbed

ROUND_FIELDS = [f.name for f in fields(RoundResult)]
SETTING_COLUMNS = ("backend", "model", "base_url")


class Record(Protocol):
    """What an experiment yields and an export writes: a `RoundResult`, a `core.experiments.batch.BatchLevel`."""

    error: str

    def to_dict(self) -> dict[str, Any]: ...


class RecordType(Protocol):
    """A record class that reads itself back from an export."""

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Self: ...


R = TypeVar("R", bound=RecordType)


def to_json(settings: dict[str, Any], records: Mapping[str, Sequence[Record]],
            summary: dict[str, Any] | None = None, run: dict[str, Any] | None = None) -> str:
    """Settings, each kind of record under its key (``rounds`` always present) and the summary; a saved
    run's label, machine and dates under ``run`` (`core.store.transfer`)."""
    data: dict[str, Any] = {"settings": settings, "rounds": [], "summary": summary or {}}
    if run:
        data["run"] = run
    data.update({key: [r.to_dict() for r in rows] for key, rows in records.items() if rows or key == "rounds"})
    return scrubbed(json.dumps(data, indent=2, ensure_ascii=False, default=str))  # a key in a URL or an error


def to_csv(settings: dict[str, Any], rows: Sequence[Record]) -> str:
    """One line per record; the backend, model and base URL repeated on each line; lists (stream timings) left out."""
    columns = ROUND_FIELDS if not rows else [k for k, v in rows[0].to_dict().items() if not isinstance(v, list | dict)]
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=[*SETTING_COLUMNS, *columns], lineterminator="\n", extrasaction="ignore")
    writer.writeheader()
    for row in rows:
        writer.writerow({**{c: settings.get(c, "") for c in SETTING_COLUMNS}, **row.to_dict()})
    return scrubbed(buffer.getvalue())


def from_json(text: str, key: str, record: type[R]) -> tuple[dict[str, Any], list[R]]:
    """Read back the settings and the ``key`` records of an export written by `to_json` (a run from the CLI
    or the app, recorded results), old spellings too."""
    data = json.loads(text)
    return renamed(data.get("settings") or {}), [record.from_dict(item) for item in data.get(key) or []]
