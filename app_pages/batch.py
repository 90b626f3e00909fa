"""Experiment 4: many requests at once. Decode throughput grows with N; prefill stays flat."""

from collections.abc import Sequence

import pandas as pd
import streamlit as st

from core.backends import BACKENDS, ENGINE
from core.backends.connect import Connection
from core.charts.base import RunView
from core.charts.batch import latency_chart, streams_chart, throughput_chart
from core.engine.server import DEFAULT_CONTEXT, EngineError
from core.experiments import EXPERIMENTS
from core.experiments import batch as bt
from core.experiments.prices import PRICE_LISTS
from ui.roofline import batch_bound_note, roof_prediction, show_prediction
from ui.runs import ExperimentPlan, Records, explain, measured, run_controls, show_run
from ui.session import BACKEND_KEY, hosted
from ui.sidebar import start_embedded
from ui.text import Texts, texts

t = texts()
st.title(t("batch.title"))
st.markdown(t.rich("batch.idea"), unsafe_allow_html=True)
embedded = BACKENDS[st.session_state.get(BACKEND_KEY, "local")].needs == ENGINE
if embedded:
    try:
        start_embedded(t, bt.BATCH_SLOTS)
        st.caption(t("batch.engine_note", slots=bt.BATCH_SLOTS, context=DEFAULT_CONTEXT))
    except EngineError as exc:  # the sidebar says why and what to do; recorded results still work
        st.warning(f"{t('common.backend_error')} {str(exc).splitlines()[0]}", icon=":material/warning:")

most = hosted().max_concurrency
choices = [n for n in (1, 2, 4, 8, 16) if (most is None or n <= most) and not (embedded and n > bt.BATCH_SLOTS)]
st.session_state["batch_concurrency"] = [n for n in st.session_state["batch_concurrency"] if n in choices]
with st.expander(t("common.settings"), expanded=True):
    levels = sorted(st.multiselect(t("batch.levels"), choices, placeholder=t("common.choose"), key="batch_concurrency"))
    output_tokens = st.select_slider(t("batch.output_tokens"), [32, 64, 128, 256], key="batch_output_tokens")
    prompt_tokens = st.select_slider(t("batch.prompt_tokens"), [200, 400, 600, 1000], key="batch_prompt_tokens")


def check(allowed: bt.Settings, conn: Connection) -> None:
    """The sweep runs at the levels the server decodes at once; refused (`ValueError`, shown as it is) when that
    leaves fewer than two of them (over the demo's concurrency: its admission refuses the plan)."""
    if len(allowed.concurrency) < min(2, len(levels)):
        skipped = ", ".join(str(n) for n in levels if n not in allowed.concurrency)
        raise ValueError(t("batch.capped", slots=bt.server_slots(conn.backend), skipped=skipped))


LEVELS = Records(table=lambda rows: pd.DataFrame(bt.TABLE.rows(rows)), name=lambda level: f"N = {level.concurrency}",
                 step="batch.level_of",
                 done="batch.done", stopped="batch.stopped", failed="batch.failed")


def _tps(value: float | None) -> str:
    return f"{value:,.0f} tok/s" if value else "–"


def draw(runs: Sequence[RunView[bt.BatchLevel]], t: Texts, key: str) -> None:
    rows = list(runs[0].rows)
    last, summary = (rows[-1] if rows else None), bt.summarize_batch(rows)
    a, b, c, d = st.columns(4)
    a.metric(t("batch.metric_decode"), _tps(last.aggregate_decode_tps if last else None),
             delta=f"{summary.decode_gain:.1f}x" if summary and summary.decode_gain else None)
    b.metric(t("batch.metric_stream"), _tps(last.per_stream_decode_tps if last else None))
    c.metric(t("batch.metric_prefill"), _tps(last.aggregate_prefill_tps if last else None))
    alone, batched = (summary.decode_cost_alone, summary.decode_cost_batched) if summary else (None, None)
    d.metric(t("batch.metric_cost"), t("batch.cost_value", alone=alone, batched=batched) if alone and batched else "–")
    left, right = st.columns(2)
    throughput, timeline = throughput_chart(runs, t), streams_chart(last, t) if last else None
    if throughput is not None:
        left.altair_chart(throughput, width="stretch", key=f"batch-throughput-{key}")
    if timeline is not None:
        right.altair_chart(timeline, width="stretch", key=f"batch-streams-{key}")
    latency = latency_chart(runs, t)
    if latency is not None:
        st.altair_chart(latency, key=f"batch-latency-{key}")
    for level in rows:
        if level.errors:
            st.warning(t("batch.failed_level", n=level.concurrency, errors=level.errors, total=len(level.streams),
                         error=level.error))
    explain(t, "batch", runs[0], notes=[batch_bound_note(t, summary.decode_gain if summary else None)])


def price_lens(t: Texts) -> None:
    """The list prices (editable, with date and source) and their output/input ratio, beside this session's."""
    names = {"provider": "price_provider", "model": "price_model", "input_per_mtok": "price_input",
             "output_per_mtok": "price_output", "as_of": "price_as_of", "source": "price_source"}
    frame = pd.DataFrame([{t(f"batch.{label}"): getattr(price, name) for name, label in names.items()}
                          for price in PRICE_LISTS])
    left, right = st.columns([3, 2])
    with left:
        prices = st.data_editor(frame, num_rows="dynamic", hide_index=True, key=f"batch_prices_{t.lang}")
    ratios = pd.to_numeric(prices[t("batch.price_output")], errors="coerce") / pd.to_numeric(
        prices[t("batch.price_input")], errors="coerce")
    lines = [f"- {model}: **{ratio:.1f}×**" for model, ratio in zip(prices[t("batch.price_model")], ratios, strict=True)
             if pd.notna(ratio) and ratio not in (float("inf"), float("-inf"))]
    right.markdown(f"**{t('batch.price_ratio')}**\n" + "\n".join(lines))
    batch = measured().batch
    if batch and batch.decode_cost_alone and batch.decode_cost_batched:
        right.markdown(t.rich("batch.price_measured", alone=batch.decode_cost_alone, batched=batch.decode_cost_batched,
                              n=batch.last.concurrency), unsafe_allow_html=True)
    elif (predicted := roof_prediction()) is not None:  # the roofs' figure until a run measures one
        right.info(t("batch.price_predicted", ratio=predicted.ratio))
    else:
        right.info(t("batch.price_missing"))


show_prediction(t, bt.ID)
plan = ExperimentPlan.of(EXPERIMENTS[bt.ID], bt.Settings(tuple(levels), int(output_tokens), int(prompt_tokens)),
                         check, slots=bt.BATCH_SLOTS)
show_run(run_controls(plan), draw, bt.ID, LEVELS)

st.subheader(t("batch.why_title"))
st.markdown(t.rich("batch.why"), unsafe_allow_html=True)
st.subheader(t("batch.price_title"))
st.markdown(t("batch.price_intro"))
price_lens(t)
