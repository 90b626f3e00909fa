"""Experiment 7: one long agent conversation, its history kept, windowed or summarized, and a pause."""

import hashlib
from collections.abc import Sequence
from dataclasses import replace

import streamlit as st

from core.charts.base import RunView
from core.charts.conversation import cost_chart, pause_chart, prompt_chart, recomputed_chart, time_chart
from core.experiments import EXPERIMENTS
from core.experiments import conversation as ex
from core.experiments.prices import PRICE_LISTS
from core.records import RoundResult
from ui.roofline import backend_prediction, local_backend
from ui.runs import ExperimentPlan, explain, measured, preview, run_controls, show_run, uploaded
from ui.text import Texts, texts

t = texts()
st.title(t("conversation.title"))
st.markdown(t.rich("conversation.idea"), unsafe_allow_html=True)

with st.expander(t("common.settings"), expanded=True):
    left, right = st.columns(2)
    rounds = left.number_input(t("conversation.rounds"), 2, ex.MAX_ROUNDS, key="conversation_conversation_rounds")
    window = left.select_slider(t("conversation.window"), [2, 4, 6, 8, 10, 12], key="conversation_window")
    threshold = left.number_input(t("conversation.threshold"), 300, 8000, step=250, key="conversation_threshold")
    strategies = right.multiselect(t("conversation.strategies"), list(ex.STRATEGIES),
                                   placeholder=t("common.choose"), key="conversation_conversation_strategies",
                                   format_func=lambda s: t(f"conversation.strategy.{s}"))
    pause = right.checkbox(t("conversation.pause"), key="conversation_pause")
    upload = st.file_uploader(t("conversation.upload"), key="conversation_upload", help=t("conversation.upload_help"))
st.caption(t("conversation.summary_rule"))
st.caption(t("conversation.reuse_note", chunk=ex.REUSE_CHUNK) if local_backend() else t("conversation.api_note"))

document, doc_name = uploaded(t, "conversation", upload, None, "default")

settings = ex.Settings(int(rounds), tuple(strategies), int(window), int(threshold), doc_name, pause=bool(pause),
                       document=document)
m, roof = measured(quiet=True), backend_prediction()  # experiment 1 of this session (or its newest saved run)
settings = ex.with_prediction(settings, m.prefill_curve, m.prefill_tps, roof.prefill_bound if roof else None)
doc_id = hashlib.sha256((document or "").encode()).hexdigest()[:12]
key = (f"{doc_id}-{rounds}-{window}-{threshold}-{pause}-{','.join(strategies)}"
       f"-{settings.prefill_tps}-{settings.attention_ns}")  # a new rate, a new prediction
prepared = preview(EXPERIMENTS[ex.ID], settings, key)
if isinstance(prepared, str):
    st.error(f"{t('common.backend_error')} {prepared}")
else:
    settings = replace(settings, fitted=prepared.fitted, conversation_strategies=prepared.conversation_strategies,
                       pause=prepared.pause, predicted_tokens=prepared.predicted_tokens,
                       predicted_seconds=prepared.predicted_seconds)
    found = {"requests": len(settings.conversation_strategies) * settings.conversation_rounds,
             "tokens": settings.predicted_tokens or 0, "spread": ex.PREDICTION_SPREAD}
    if settings.prefill_tps and settings.predicted_seconds is not None:
        growth = (" " + t.rich("conversation.predict_growth", per_1k=2 * settings.attention_ns / 1000)
                  if settings.attention_ns else "")
        st.markdown(f"**{t('conversation.prediction')}** " + t.rich(
            "conversation.predict", rate=settings.prefill_tps, seconds=settings.predicted_seconds,
            source=t(f"conversation.source_{settings.predicted_from}"), **found) + growth, unsafe_allow_html=True)
    else:
        st.markdown(f"**{t('conversation.prediction')}** " + t.rich("conversation.predict_tokens", **found),
                    unsafe_allow_html=True)


def draw(runs: Sequence[RunView[RoundResult]], t: Texts, key: str) -> None:
    rows = runs[0].rows
    found = ex.summarize(rows)
    keep, win, exact, cheap = st.columns(4)
    for column, name, label in ((keep, "keep", "metric_keep"), (win, "window", "metric_window")):
        total = found[name].recomputed if name in found else None
        column.metric(t(f"conversation.{label}"), f"{total:,}" if total is not None else "–")
    exact.metric(t("conversation.metric_exact"), f"{sum(s.exact for s in found.values())} / "
                 f"{sum(s.rounds for s in found.values())}" if found else "–")
    reached = max((s.rounds for s in found.values()), default=0)
    upto = max((n for n in ex.CHEAPEST_AT if n <= reached), default=reached)
    best = ex.cheapest(rows, upto, PRICE_LISTS[0]) if upto else None
    cheap.metric(t("conversation.metric_cheapest", round=upto),
                 t(f"conversation.strategy.{best[0]}") if best else "–")
    for index, chart in enumerate((prompt_chart(runs, t), recomputed_chart(runs, t))):
        if chart is not None:
            st.altair_chart(chart, width="stretch" if index == 0 else "content", key=f"conversation-{index}-{key}")
    left, right = st.columns(2)
    for column, chart, name in ((left, time_chart(runs, t), "time"), (right, cost_chart(runs, t), "cost")):
        if chart is not None:
            column.altair_chart(chart, width="stretch", key=f"conversation-{name}-{key}")
    st.caption(t("conversation.cost_note", lists=", ".join(f"{p.provider} {p.model}" for p in PRICE_LISTS)))
    paused = pause_chart(runs, t)
    if paused is not None:
        st.altair_chart(paused, width="stretch", key=f"conversation-pause-{key}")
        st.caption(t("conversation.pause_note"))
    explain(t, ex.ID, runs[0])


plan = ExperimentPlan.of(EXPERIMENTS[ex.ID], settings)
show_run(run_controls(plan), draw, ex.ID)
