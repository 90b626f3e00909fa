"""CSV and JSON exports of a run: its settings (never a key) and one record per round or level."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Sequence
from dataclasses import fields
from typing import Any, Protocol

from core.records import RoundResult

ROUND_FIELDS = [f.name for f in fields(RoundResult)]
SETTING_COLUMNS = ("backend", "model", "base_url")


class Record(Protocol):
    """What an experiment yields and an export writes: a `RoundResult`, a `core.experiments.batch.BatchLevel`."""

    error: str

    def to_dict(self) -> dict[str, Any]: ...


def to_json(settings: dict[str, Any], rows: Sequence[Record], summary: dict[str, Any] | None = None,
            levels: Sequence[Record] = (), run: dict[str, Any] | None = None) -> str:
    """Settings, rounds and summary; a concurrency sweep's records go under ``levels``; a stored run's
    label, machine and dates under ``run`` (`core.store.transfer`)."""
    data: dict[str, Any] = {"settings": settings, "rounds": [r.to_dict() for r in rows], "summary": summary or {}}
    if run:
        data["run"] = run
    if levels:
        data["levels"] = [level.to_dict() for level in levels]
    return json.dumps(data, indent=2, ensure_ascii=False, default=str)


def to_csv(settings: dict[str, Any], rows: Sequence[Record]) -> str:
    """One line per record; the backend, model and base URL repeated on each line; lists (stream timings) left out."""
    columns = ROUND_FIELDS if not rows else [k for k, v in rows[0].to_dict().items() if not isinstance(v, list | dict)]
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=[*SETTING_COLUMNS, *columns], lineterminator="\n", extrasaction="ignore")
    writer.writeheader()
    for row in rows:
        writer.writerow({**{c: settings.get(c, "") for c in SETTING_COLUMNS}, **row.to_dict()})
    return buffer.getvalue()


def rows_from_json(text: str) -> tuple[dict[str, Any], list[RoundResult]]:
    """Read back an export written by `to_json` (recorded results, a run from the CLI)."""
    data = json.loads(text)
    rounds = [RoundResult(**{k: v for k, v in r.items() if k in ROUND_FIELDS}) for r in data["rounds"]]
    return data.get("settings", {}), rounds
