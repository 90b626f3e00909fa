"""The numbers this session has measured so far, for the explainer page to quote."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, TypeVar

import streamlit as st

from core.charts.base import RunView
from core.conclusions import DISTURBED, conclusion_of
from core.experiments import EXPERIMENTS, batch, conversation, input_length, output_length, prefix_cache
from core.experiments.batch import BatchSummary, summarize_batch
from core.export import Record
from core.records import RoundResult
from core.runs.runner import BackgroundRun
from core.stats import QuadraticFit
from ui.runs.saved import latest_saved
from ui.text import Texts

R = TypeVar("R", bound=Record)


def view_of(run: BackgroundRun) -> RunView[Any]:
    """A run as its page concludes it: its records, and the machine's state and the conclusion kept with it where
    it carries them (a finished or a saved run)."""
    return RunView(run.label, run.rows, getattr(run, "state", None), getattr(run, "conclusion", None))


def newest(experiment: str) -> RunView[Any] | None:
    """The newest run of ``experiment`` that measured anything: this session's, else the newest saved one (a reload
    or a restart keeps the numbers and the conclusion)."""
    for run in reversed(st.session_state.get("history", {}).get(experiment, [])):
        if any(not r.error for r in run.rows):
            return view_of(run)
    saved = latest_saved(experiment)
    return view_of(saved) if saved else None


def rows_of(experiment: str, kind: type[R], quiet: bool = False) -> list[R]:
    """The records (of type ``kind``) of the newest run of ``experiment`` that measured anything (`newest`);
    with ``quiet``, none where that run's conclusion is disturbed (its rates are not this machine's alone)."""
    view = newest(experiment)
    if view is None or (quiet and conclusion_of(EXPERIMENTS[experiment], view.rows, view.state,
                                                view.conclusion).status == DISTURBED):
        return []
    return [r for r in view.rows if isinstance(r, kind) and not r.error]


@dataclass
class Measured:
    prefill_tps: float | None
    decode_tps: float | None
    ms_per_output_token: float | None
    cache: dict[str, prefix_cache.StrategySummary]
    batch: BatchSummary | None = None  # experiment 4: its first and last level
    prefill_curve: QuadraticFit | None = None  # experiment 1's prefill ms over prompt tokens

    @property
    def ratio(self) -> float | None:
        if self.prefill_tps and self.decode_tps:
            return self.prefill_tps / self.decode_tps
        return None


def measured(quiet: bool = False) -> Measured:
    """This session's figures, as its newest runs measured them (what a page quotes, labelled as measured). A
    prediction asks with ``quiet``: a disturbed run's rates are left out, so it falls back to the roofs or to
    nothing rather than predict this machine from a busy one (a 20x "batching bound" from a run the meter called
    busy, beside the roofs' 5x, was seen)."""
    inp = input_length.summarize_input(rows_of(input_length.ID, RoundResult, quiet))
    out = output_length.summarize_output(rows_of(output_length.ID, RoundResult, quiet))
    return Measured(inp.prefill_tps, out.decode_tps, out.ms_per_output_token,
                    prefix_cache.summarize_cache(rows_of(prefix_cache.ID, RoundResult, quiet)),
                    summarize_batch(rows_of(batch.ID, batch.BatchLevel, quiet)), inp.prefill_curve)


def compaction_measured(t: Texts) -> str:
    """The doctor's compaction finding, priced on this machine: what experiment 7's newest run measured for a summary
    round against an appended one; else the offer to run it."""
    figure = conversation.doctor_figure(rows_of(conversation.ID, conversation.ConversationRound))
    return t("conversation.doctor_measured", **figure) if figure else t("conversation.doctor_offer")
