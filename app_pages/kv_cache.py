"""Experiment 6: the same answer written with and without the KV cache; time bought with memory."""

from collections.abc import Sequence

import pandas as pd
import streamlit as st

from core.charts.base import RunView
from core.charts.kv_cache import memory_chart, step_chart, total_chart
from core.experiments import EXPERIMENTS
from core.experiments import kv_cache as ex
from ui.roofline import backend_prediction, local_backend
from ui.runs import ExperimentPlan, Records, explain, measured, run_controls, show_run
from ui.text import Texts, texts


def table(rows: Sequence[ex.KvStep]) -> pd.DataFrame:
    columns = ["round", "way", "step", "context", "computed_tokens", "cached_tokens", "step_ms", "predicted_ms",
               "token", "piece", "kv_bytes", "error"]
    return pd.DataFrame.from_records([r.to_dict() for r in rows], columns=columns)


RECORDS = Records(table=table, name=lambda r: f"{r.way} · step {r.step}")


def prediction_text(t: Texts, found: ex.KvPrediction, settings: ex.Settings) -> str:
    """The slowdown and its spread, then whether these settings will show the parabola (`ex.KvPrediction`)."""
    passed = found.passed_10x
    slower = t.rich("kv_cache.predict" if passed is not None else "kv_cache.predict_never", ratio=found.ratio,
                    steps=len(found.cached_ms) - 1, low=found.low, high=found.high, passed=passed,
                    prefill=settings.prefill_tps or 0, decode=settings.decode_tps or 0,
                    source=t(f"kv_cache.source_{settings.predicted_from}"))
    shape = t.rich("kv_cache.predict_parabola" if found.rise >= ex.MIN_RISE else "kv_cache.predict_flat",
                   share=found.growing_share, rise=found.rise, seconds=found.seconds)
    return f"{slower} {shape}"


def draw(runs: Sequence[RunView[ex.KvStep]], t: Texts, key: str) -> None:
    rows = runs[0].rows
    found = ex.summarize(rows)
    same, cached, recomputed, ratio, memory = st.columns(5)
    if found is not None:
        same.metric(t("kv_cache.metric_same"), t("kv_cache.same_yes", n=found.steps + 1) if found.same_answer
                    else t("kv_cache.same_no", step=found.first_difference),
                    help=t("kv_cache.same_help", n=found.steps + 1) if found.same_answer else None)
        cached.metric(t("kv_cache.metric_cached"), f"{found.cached_total_ms / 1000:,.2f} s")
        recomputed.metric(t("kv_cache.metric_recomputed"), f"{found.recomputed_total_ms / 1000:,.2f} s")
        ratio.metric(t("kv_cache.metric_ratio"), f"{found.ratio:,.1f}x")
        memory.metric(t("kv_cache.metric_memory"), f"{found.kv_bytes / 1e6:,.2f} MB" if found.kv_bytes else "–")
    left, right = st.columns(2)
    step, total = step_chart(rows, t), total_chart(rows, t)
    if step is not None:
        left.altair_chart(step, width="stretch", key=f"kv-step-{key}")
    if total is not None:
        right.altair_chart(total, width="stretch", key=f"kv-total-{key}")
    draw_memory(rows, found, t, key)
    if found is not None:
        with st.expander(t("kv_cache.answer")):
            for way in ex.WAYS:
                st.markdown(f"**{t(f'kv_cache.way_{way}')}**")
                st.code("".join(r.piece for r in ex.measured(rows, way)), language=None, wrap_lines=True)
    explain(t, "kv_cache", runs[0])


def draw_memory(rows: Sequence[ex.KvStep], found: ex.KvSummary | None, t: Texts, key: str) -> None:
    chart = memory_chart(rows, t)
    left, right = st.columns(2)
    if chart is not None:
        left.altair_chart(chart, width="stretch", key=f"kv-memory-{key}")
    with right:
        if found is None:
            return
        per_token = found.kv_bytes_per_token
        if found.kv_bytes is None or per_token is None:
            st.caption(t("kv_cache.memory_unknown"))
        else:
            st.markdown(t.rich("kv_cache.memory", mb=found.kv_bytes / 1e6, tokens=found.kv_bytes // per_token,
                               per_token=per_token), unsafe_allow_html=True)
            if found.slot_tokens and found.slot_context:
                st.caption(t("kv_cache.memory_slot", tokens=found.slot_tokens, cells=found.slot_context,
                             reserved=found.slot_context * per_token / 1e6))
        st.caption(t("kv_cache.memory_chapter", model=ex.CHAPTER_MODEL, context=ex.CHAPTER_CONTEXT,
                     gb=ex.CHAPTER_KV_BYTES / 1e9, this_gb=(per_token or 0) * ex.CHAPTER_CONTEXT / 1e9))


t = texts()
st.title(t("kv_cache.title"))
st.markdown(t.rich("kv_cache.idea"), unsafe_allow_html=True)

with st.expander(t("common.settings"), expanded=True):
    prompt_tokens = st.number_input(t("kv_cache.prompt_tokens"), 16, 2000, step=50, key="kv_cache_prompt_tokens")
    steps = st.select_slider(t("kv_cache.steps"), [8, 16, 32, 64, 128, 256], key="kv_cache_steps")

m, roof = measured(quiet=True), backend_prediction()
settings = ex.with_prediction(ex.Settings(int(prompt_tokens), int(steps)), (m.prefill_tps, m.decode_tps),
                              (roof.prefill_bound, roof.decode_bound) if roof else None)
found = ex.prediction_of(settings)
if found is not None:
    st.markdown(f"**{t('kv_cache.prediction')}** " + prediction_text(t, found, settings), unsafe_allow_html=True)
elif local_backend():
    st.caption(t("kv_cache.no_prediction"))
if not local_backend():
    st.info(t("kv_cache.api", tokens=ex.plan(settings).tokens, prompt=settings.prompt_tokens), icon=":material/info:")
plan = ExperimentPlan.of(EXPERIMENTS[ex.ID], settings)
show_run(run_controls(plan), draw, ex.ID, RECORDS)
