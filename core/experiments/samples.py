"""Recorded results shipped with the project, for a look without any backend or key.

``samples/embedded_default.json`` was written by ``python -m core --json`` on the embedded default
(SmolLM2-135M on 2 CPU cores), ``samples/embedded_batch.json`` by ``python -m core --only batch
--json`` (experiment 4, 8 slots); ``samples/chapter_reference.json`` is the chapter's published table.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from core.experiments.batch import BATCH
from core.experiments.batch_summary import levels_from_json
from core.export import Record, rows_from_json

SAMPLES_DIR = Path(__file__).resolve().parents[2] / "samples"
EMBEDDED_DEFAULT = SAMPLES_DIR / "embedded_default.json"
EMBEDDED_BATCH = SAMPLES_DIR / "embedded_batch.json"


def recorded_rows(experiment: str) -> tuple[dict[str, Any], list[Record]]:
    """The recorded settings and the rows of one experiment (experiment 4: its levels)."""
    if experiment == BATCH:
        batch_settings, levels = levels_from_json(EMBEDDED_BATCH.read_text())
        return batch_settings, list(levels)
    settings, rows = rows_from_json(EMBEDDED_DEFAULT.read_text())
    return settings, [r for r in rows if r.experiment == experiment]


def chapter_reference() -> dict[str, Any]:
    return json.loads((SAMPLES_DIR / "chapter_reference.json").read_text())
