"""Recorded results shipped with the project, for a look without any backend or key.

``samples/embedded_default.json`` was written by ``python -m core --json`` on the embedded default
(SmolLM2-135M on 2 CPU cores); ``samples/chapter_reference.json`` is the chapter's published table.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from core.export import rows_from_json
from core.results import RoundResult

SAMPLES_DIR = Path(__file__).resolve().parent.parent / "samples"
EMBEDDED_DEFAULT = SAMPLES_DIR / "embedded_default.json"


def recorded_rows(experiment: str) -> tuple[dict[str, Any], list[RoundResult]]:
    """The recorded settings and the rows of one experiment."""
    settings, rows = rows_from_json(EMBEDDED_DEFAULT.read_text())
    return settings, [r for r in rows if r.experiment == experiment]


def chapter_reference() -> dict[str, Any]:
    return json.loads((SAMPLES_DIR / "chapter_reference.json").read_text())
