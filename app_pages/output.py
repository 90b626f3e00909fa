"""Experiment 2: total time and per-token time against answer length."""

from collections.abc import Sequence

import streamlit as st

from core.charts.base import RunView
from core.charts.output import output_charts
from core.experiments import EXPERIMENTS
from core.experiments import output_length as ex
from core.records import RoundResult
from ui.roofline import ratio_verdict, show_prediction
from ui.runs import ExperimentPlan, explain, measured, run_controls, show_run
from ui.text import Texts, texts

t = texts()
st.title(t("output.title"))
st.markdown(t.rich("output.idea"), unsafe_allow_html=True)

with st.expander(t("common.settings"), expanded=True):
    lengths = st.multiselect(t("output.lengths"), [8, 16, 32, 64, 128, 256, 512, 1024],
                             placeholder=t("common.choose"), key="output_lengths")
    repeats = st.number_input(t("common.repeats"), 1, 5, key="output_repeats")


def draw(runs: Sequence[RunView[RoundResult]], t: Texts, key: str) -> None:
    rows = runs[0].rows
    summary = ex.summarize_output(rows)
    prefill_tps = measured().prefill_tps
    ratio = prefill_tps / summary.decode_tps if prefill_tps and summary.decode_tps else None
    a, b, c = st.columns(3)
    a.metric(
        t("output.metric_speed"), f"{summary.decode_tps:,.1f} tok/s" if summary.decode_tps else "–"
    )
    per_token = summary.ms_per_output_token
    b.metric(t("output.metric_per_token"), f"{per_token:.1f} ms" if per_token else "–")
    c.metric(t("output.metric_ratio"), f"{ratio:.1f} : 1" if ratio else t("output.ratio_missing"))
    charts = output_charts(runs, t)
    left, right = st.columns(2)
    if charts is not None:
        left.altair_chart(charts[0], width="stretch", key=f"output-total-{key}")
        right.altair_chart(charts[1], width="stretch", key=f"output-per-token-{key}")
    notes = [t("output.ratio_note", ratio=ratio, prefill=prefill_tps), ratio_verdict(t, ratio)] if ratio else []
    explain(t, "output", runs[0], notes=notes)


show_prediction(t, ex.ID)
plan = ExperimentPlan.of(EXPERIMENTS[ex.ID], ex.Settings(tuple(sorted(lengths)), int(repeats)))
show_run(run_controls(plan), draw, ex.ID)
