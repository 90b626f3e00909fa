"""Experiment 5: this machine's limits, and where its prefill and decode sit under them."""

from collections.abc import Sequence

import pandas as pd
import streamlit as st

from core.charts.base import RunView
from core.charts.roofline import roofline_chart
from core.experiments import EXPERIMENTS
from core.experiments import roofline as rf
from core.roofline import peaks
from core.roofline.hardware import ACCELERATORS
from core.roofline.report import percent, si
from ui.roofline import (
    ACCELERATOR_KEY,
    BYTES_KEY,
    PARAMS_KEY,
    backend_model,
    backend_prediction,
    backend_roof,
    chart_marks,
    local_backend,
    points_table,
)
from ui.runs import ExperimentPlan, Records, explain, run_controls, show_run
from ui.text import Texts, texts

RECORDS = Records(table=lambda rows: pd.DataFrame(rf.TABLE.rows(rows)), name=lambda r: r.kind, empty="common.no_run")


def draw(runs: Sequence[RunView], t: Texts, key: str) -> None:
    """The run's figures as they arrive, and whether it measured both roofs and both phases."""
    found = rf.summarize(runs[0].rows) or {}
    cells = st.columns(4)
    for cell, kind, unit in zip(cells, (rf.COMPUTE, rf.BANDWIDTH, rf.PREFILL, rf.DECODE),
                                ("FLOP/s", "B/s", "tokens/s", "tokens/s"), strict=True):
        value = found.get(kind)
        cell.metric(t(f"roofline.metric_{kind}"), (si(value, unit) if unit != "tokens/s" else f"{value:,.1f} {unit}")
                    if value else "–")
    explain(t, "roofline", runs[0])


t = texts()
st.title(t("roofline.title"))
st.markdown(t.rich("roofline.idea"), unsafe_allow_html=True)

st.subheader(t("roofline.machine_title"))
if local_backend():
    plan = ExperimentPlan.of(EXPERIMENTS[rf.ID], rf.Settings())
    show_run(run_controls(plan, recorded=False), draw, rf.ID, RECORDS)
else:
    names = ["", *ACCELERATORS]
    st.selectbox(t("roofline.accelerator"), names, key=ACCELERATOR_KEY,
                 format_func=lambda name: name or t("roofline.accelerator_unknown"))
    left, right = st.columns(2)
    left.number_input(t("roofline.params"), min_value=0.0, value=None, step=1.0, key=PARAMS_KEY)
    right.selectbox(t("roofline.bytes_per_weight"), [2.0, 1.0, 0.5], key=BYTES_KEY)
roof = backend_roof()

if roof is None:
    if local_backend() and (problem := peaks.cache_problem()):
        st.warning(t("roofline.cache_unusable", problem=problem), icon=":material/warning:")
    st.info(t("roofline.no_roof_local" if local_backend() else "roofline.no_roof_api"))
else:
    a, b, c = st.columns(3)
    a.metric(t("roofline.compute"), si(roof.flops, "FLOP/s") if roof.flops else t("roofline.unpublished"))
    b.metric(t("roofline.bandwidth"), si(roof.bandwidth, "B/s"))
    c.metric(t("roofline.ridge"), f"{roof.ridge:.1f} FLOP/B" if roof.ridge else "–")
    compute_how = roof.compute.describe(t) if roof.compute else t("roofline.unpublished")
    st.caption(t("roofline.how", machine=roof.machine, when=roof.as_of, compute=compute_how,
                 memory=roof.memory.describe(t), source=roof.memory.source))
    if roof.notes.get("busy"):
        st.warning(t("roofline.probe_busy", share=100 * float(roof.notes.get("cpu_share", 0))), icon=":material/speed:")

model = backend_model()
st.subheader(t("roofline.model_title"))
if model is None:
    st.info(t("roofline.no_model"))
else:
    kv = f"{model.kv_bytes_per_token:,}" if model.kv_bytes_per_token else t("roofline.unknown")
    head = {True: t("roofline.tied"), False: t("roofline.untied"), None: t("roofline.unknown")}[model.tied_embeddings]
    st.markdown(t("roofline.model_facts", name=model.name, params=model.n_params, size=model.size_bytes,
                  decode=model.decode_bytes, head=head, kv=kv, ftype=model.ftype or "–", source=model.source))

prediction = backend_prediction()
if prediction is not None:
    st.subheader(t("roofline.predict_title"))
    st.markdown(t.rich("roofline.predict_ratio", prefill=prediction.prefill_bound, decode=prediction.decode_bound,
                       ratio=prediction.ratio, intensity=prediction.decode_intensity), unsafe_allow_html=True)
    key = "roofline.predict_gain_yes" if prediction.can_show_batching else "roofline.predict_gain_no"
    st.markdown(t.rich(key, gain=prediction.gain_bound, source=t(f"roofline.gain_from_{prediction.gain_from}")),
                unsafe_allow_html=True)

st.subheader(t("roofline.chart_title"))
roofs, marks, mine, gpu_model = chart_marks(t, roof, model)
st.altair_chart(roofline_chart(roofs, marks, t), width="stretch", key="roofline-chart")
st.caption(t("roofline.chart_caption", model=gpu_model.name))

st.subheader(t("roofline.table_title"))
if mine:
    frame = pd.DataFrame(points_table(mine))
    assert roof is not None
    shown = frame.assign(**{"FLOP/s": frame["FLOP/s"].map(lambda v: si(v, "FLOP/s")),
                            "bytes/s": frame["bytes/s"].map(lambda v: si(v, "B/s")),
                            "MFU": frame["MFU"].map(percent), "MBU": frame["MBU"].map(percent)})
    st.dataframe(shown, hide_index=True, key="roofline-table", column_config={
        "MFU": st.column_config.Column(help=t("roofline.mfu_help", peak=si(roof.flops, "FLOP/s"))),
        "MBU": st.column_config.Column(help=t("roofline.mbu_help", peak=si(roof.bandwidth, "B/s")))})
    st.caption(t("roofline.denominators", flops=si(roof.flops, "FLOP/s") if roof.flops else t("roofline.unpublished"),
                 bandwidth=si(roof.bandwidth, "B/s")))
    if any(p.probe_undershot for p in mine):
        st.warning(t("roofline.undershot"), icon=":material/info:")
else:
    st.info(t("roofline.no_points"))

for section in t.raw("roofline.sections"):
    st.subheader(section["heading"])
    st.markdown(t.colour(section["body"]), unsafe_allow_html=True)
