"""Recorded results shipped with the project, for a look without any backend or key.

``samples/embedded_default.json`` was written by ``python -m core --json`` on the embedded default
(SmolLM2-135M on 2 CPU cores), ``samples/embedded_batch.json`` by ``python -m core --only batch
--json`` (experiment 4, 8 slots), ``samples/embedded_arrivals.json`` by ``python -m bench arrivals`` (experiment 8's
default sweep); ``samples/chapter_reference.json`` is the chapter's published table.
They were written before the ids and field names were made one; they load through `core.records.renamed`.
Each experiment names its sample in `core.experiments.EXPERIMENTS` and reads it with ``recorded()``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

SAMPLES_DIR = Path(__file__).resolve().parents[2] / "samples"
EMBEDDED_DEFAULT = SAMPLES_DIR / "embedded_default.json"
EMBEDDED_BATCH = SAMPLES_DIR / "embedded_batch.json"


def chapter_reference() -> dict[str, Any]:
    data: dict[str, Any] = json.loads((SAMPLES_DIR / "chapter_reference.json").read_text())
    return data
