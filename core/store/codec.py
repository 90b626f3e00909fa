"""A stored record back to its type: experiment 4's records are `BatchLevel`s, the others `RoundResult`s."""

from __future__ import annotations

from dataclasses import fields
from typing import Any

from core.experiments.batch import BATCH, BatchLevel
from core.export import Record
from core.records import RoundResult

ROUND_FIELDS = frozenset(f.name for f in fields(RoundResult))


def record_from_dict(experiment: str, data: dict[str, Any]) -> Record:
    """A record as its ``to_dict()`` wrote it (fields it does not know are dropped: checked on import)."""
    if experiment == BATCH:
        return BatchLevel.from_dict(data)
    return RoundResult(**{k: v for k, v in data.items() if k in ROUND_FIELDS})
