"""The numbers this session has measured so far, for the explainer page to quote."""

from __future__ import annotations

from dataclasses import dataclass

import streamlit as st

from core.experiments import rounds as ex
from core.experiments import summaries
from core.experiments.batch import BATCH
from core.experiments.batch_summary import BatchSummary, summarize_batch
from core.records import RoundResult
from ui.store import latest_saved


def rows_of(experiment: str) -> list[RoundResult]:
    """The rows of the newest run of ``experiment`` that measured anything: this session's, else the
    newest saved one (a reload or a restart keeps the numbers)."""
    for run in reversed(st.session_state.get("history", {}).get(experiment, [])):
        rows = [r for r in run.rows if not r.error]
        if rows:
            return rows
    saved = latest_saved(experiment)
    return [r for r in saved.rows if not r.error] if saved else []  # type: ignore[misc]


@dataclass
class Measured:
    prefill_tps: float | None
    decode_tps: float | None
    ms_per_token: float | None
    cache: dict[str, summaries.StrategySummary]
    batch: BatchSummary | None = None  # experiment 4: its first and last level

    @property
    def ratio(self) -> float | None:
        if self.prefill_tps and self.decode_tps:
            return self.prefill_tps / self.decode_tps
        return None


def measured() -> Measured:
    inp, out = summaries.summarize_input(rows_of(ex.INPUT)), summaries.summarize_output(rows_of(ex.OUTPUT))
    return Measured(inp.prefill_tokens_per_s, out.decode_tokens_per_s, out.ms_per_token,
                    summaries.summarize_cache(rows_of(ex.CACHE)), summarize_batch(rows_of(BATCH)))
