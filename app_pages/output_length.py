"""Experiment 2: total time and per-token time against answer length."""

from collections.abc import Sequence

import streamlit as st

from core.backends.connect import Connection
from core.experiments import rounds as ex
from core.experiments import summaries
from core.experiments.runner import RowSource
from core.experiments.verdicts import output_verdict
from ui.charts import output_charts
from ui.content import Texts
from ui.contract import ExperimentPlan, RunView
from ui.experiment import explain, run_controls, show_run
from ui.measured import measured
from ui.roofline import ratio_verdict, show_prediction
from ui.texts import texts

t = texts()
st.title(t("output.title"))
st.markdown(t.rich("output.idea"), unsafe_allow_html=True)

with st.expander(t("common.settings"), expanded=True):
    lengths = st.multiselect(t("output.lengths"), [8, 16, 32, 64, 128, 256, 512, 1024], key="output_lengths")
    repeats = st.number_input(t("common.repeats"), 1, 5, key="output_repeats")


def make_source(conn: Connection) -> RowSource:
    return lambda cancel, progress: ex.output_length_sweep(conn.backend, sorted(lengths), repeats, cancel=cancel,
                                                           on_progress=progress)


def draw(runs: Sequence[RunView], t: Texts, key: str) -> None:
    rows = runs[0].rows
    summary = summaries.summarize_output(rows)
    prefill_tps = measured().prefill_tps
    ratio = prefill_tps / summary.decode_tokens_per_s if prefill_tps and summary.decode_tokens_per_s else None
    a, b, c = st.columns(3)
    a.metric(
        t("output.metric_speed"), f"{summary.decode_tokens_per_s:,.1f} tok/s" if summary.decode_tokens_per_s else "–"
    )
    b.metric(t("output.metric_per_token"), f"{summary.ms_per_token:.1f} ms" if summary.ms_per_token else "–")
    c.metric(t("output.metric_ratio"), f"{ratio:.1f} : 1" if ratio else t("output.ratio_missing"))
    charts = output_charts(runs, t)
    left, right = st.columns(2)
    if charts is not None:
        left.altair_chart(charts[0], width="stretch", key=f"output-total-{key}")
        right.altair_chart(charts[1], width="stretch", key=f"output-per-token-{key}")
    shown, values = output_verdict(rows)
    verdict = t("output.shown", **values) if shown else t("output.not_shown")
    if ratio:
        verdict += " " + t("output.ratio_note", ratio=ratio) + " " + ratio_verdict(t, ratio)
    explain(t, "output", shown, verdict)


show_prediction(t, ex.OUTPUT)
plan = ExperimentPlan(
    ex.OUTPUT, {"lengths": sorted(lengths), "repeats": repeats}, ex.plan_output(lengths, repeats), make_source
)
show_run(run_controls(plan), draw, ex.OUTPUT)
