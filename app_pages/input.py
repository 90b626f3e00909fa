"""Experiment 1: TTFT and server prefill time against prompt length."""

from collections.abc import Sequence

import streamlit as st

from core.charts.base import RunView
from core.charts.input import input_chart
from core.experiments import EXPERIMENTS
from core.experiments import input_length as ex
from core.records import RoundResult
from ui.runs import ExperimentPlan, explain, run_controls, show_run
from ui.text import Texts, texts

t = texts()
st.title(t("input.title"))
st.markdown(t.rich("input.idea"), unsafe_allow_html=True)

with st.expander(t("common.settings"), expanded=True):
    sizes = st.multiselect(t("input.sizes"), [128, 256, 512, 1024, 2048, 4096, 6144, 8192, 16384, 32768, 65536],
                           placeholder=t("common.choose"), key="input_sizes", help=t("input.sizes_help"))
    repeats = st.number_input(t("common.repeats"), 1, 5, key="input_repeats")


def draw(runs: Sequence[RunView[RoundResult]], t: Texts, key: str) -> None:
    rows = runs[0].rows
    summary = ex.summarize_input(rows)
    a, b, c = st.columns(3)
    a.metric(
        t("input.metric_speed"), f"{summary.prefill_tps:,.0f} tok/s" if summary.prefill_tps else "–"
    )
    per_1k = summary.ms_per_1k()
    b.metric(t("input.metric_per_1k"), f"{per_1k:,.0f} ms" if per_1k else "–")
    fit = summary.ttft_fit  # below zero it is said as what it is: time growing faster than a line, not a cost
    c.metric(t("input.metric_intercept"), f"{fit.intercept:,.0f} ms" if fit else "–",
             help=t("input.intercept_help", intercept=fit.intercept, r2=fit.r2) if fit else None)
    chart, slot = input_chart(runs, t), st.empty()
    if chart is not None:
        slot.altair_chart(chart, width="stretch", key=f"input-chart-{key}")
    explain(t, "input", runs[0])


plan = ExperimentPlan.of(EXPERIMENTS[ex.ID], ex.Settings(tuple(sorted(sizes)), int(repeats)))
show_run(run_controls(plan), draw, ex.ID)
