"""A stored record back to its type, as the registry says (`Experiment.record`: rounds or levels)."""

from __future__ import annotations

from typing import Any

from core.experiments.registry import EXPERIMENTS
from core.export import Record
from core.records import RoundResult


def record_from_dict(experiment: str, data: dict[str, Any]) -> Record:
    """A record as its ``to_dict()`` wrote it, old spellings made current (checked on import)."""
    spec = EXPERIMENTS.get(experiment)
    record: Record = (spec.record if spec else RoundResult).from_dict(data)  # type: ignore[assignment]
    return record
