"""CSV and JSON exports of a run: its settings (never a key) and one record per round."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Sequence
from dataclasses import fields
from typing import Any

from core.results import RoundResult

ROUND_FIELDS = [f.name for f in fields(RoundResult)]
SETTING_COLUMNS = ("backend", "model", "base_url")


def to_json(settings: dict[str, Any], rows: Sequence[RoundResult], summary: dict[str, Any] | None = None) -> str:
    return json.dumps({"settings": settings, "rounds": [r.to_dict() for r in rows], "summary": summary or {}},
                      indent=2, ensure_ascii=False, default=str)


def to_csv(settings: dict[str, Any], rows: Sequence[RoundResult]) -> str:
    """One line per round; the backend, model and base URL repeated on each line."""
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=[*SETTING_COLUMNS, *ROUND_FIELDS], lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({**{c: settings.get(c, "") for c in SETTING_COLUMNS}, **row.to_dict()})
    return buffer.getvalue()


def rows_from_json(text: str) -> tuple[dict[str, Any], list[RoundResult]]:
    """Read back an export written by `to_json` (recorded results, a run from the CLI)."""
    data = json.loads(text)
    return data.get("settings", {}), [RoundResult(**{k: v for k, v in r.items() if k in ROUND_FIELDS}) for r in data["rounds"]]
