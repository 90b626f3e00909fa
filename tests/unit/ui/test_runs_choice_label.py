"""Saved runs as the compare and report choices name them (ui/runs/saved.py): never two alike."""

from __future__ import annotations

import time

from core.store import SavedRun
from ui.runs.saved import choice_label


def saved(run_id: str) -> SavedRun:
    return SavedRun(run_id, "cache", "llama-server · SmolLM2 · 2026-12-02 08:45", "llama", "m", {}, {"cpu": "x"}, {},
                    "measured", "", "done", time.time(), None, 6)


def test_runs_started_the_same_minute_with_the_same_label_read_differently() -> None:
    first, second = choice_label(saved("3fa9c2d1e0aa")), choice_label(saved("77b0e4c1d2bb"))
    assert first != second and "#3fa9c2" in first and "#77b0e4" in second
