"""Experiment 8: requests arriving over time. TTFT stays flat while the server keeps up, then the queue takes over."""

from collections.abc import Sequence
from dataclasses import replace

import pandas as pd
import streamlit as st

from core.charts.arrivals import goodput_chart, split_chart, timeline_chart, ttft_chart
from core.charts.base import RunView
from core.experiments import EXPERIMENTS
from core.experiments import arrivals as ar
from core.experiments.prices import PRICE_LISTS
from ui.roofline import local_backend
from ui.runs import ExperimentPlan, Records, explain, measured, run_controls, show_run
from ui.session import hosted
from ui.text import Texts, texts

RATES = [0.1, 0.25, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]
API_RATES = [0.1, 0.25, 0.5, 1.0]  # an API bills every request: the lesson there is the network's share


def level_table(rows: Sequence[ar.ArrivalLevel]) -> pd.DataFrame:
    return pd.DataFrame.from_records([{k: v for k, v in r.to_dict().items() if k != "streams"} for r in rows])


LEVELS = Records(table=level_table, name=lambda level: f"{level.rate:g}/s", step="arrivals.level_of",
                 done="arrivals.done", stopped="arrivals.stopped", failed="arrivals.failed")


def _ms(value: float | None) -> str:
    return f"{value:,.0f} ms" if value is not None else "–"


def metrics(rows: Sequence[ar.ArrivalLevel], t: Texts, ttft_target: float, itl_target: float) -> None:
    found = ar.summarize(rows)
    top = found.levels[-1] if found else None
    a, b, c, d, e = st.columns(5)
    a.metric(t("arrivals.metric_capacity"), f"{found.capacity:.2f}/s" if found and found.capacity else "–")
    b.metric(t("arrivals.metric_ttft"), ("≥ " if top and top.cut else "") + _ms(top.ttft_p50_ms if top else None))
    shares = [(lv.rate, share) for lv in found.levels if (share := ar.queue_share(lv)) is not None] if found else []
    reported = found is not None and any(lv.queue_mean_ms is not None for lv in found.levels)
    c.metric(t("arrivals.metric_queue"), f"{shares[-1][1]:.0%} · {shares[-1][0]:g}/s" if shares
             else "–" if reported or not top else t("arrivals.not_reported"))
    good = ar.goodput(top, ttft_target, itl_target)[0] if top else None
    d.metric(t("arrivals.metric_goodput"), f"{good} / {top.requests}" if top and good is not None else "–")
    worst = max((lv.client_p99_ms or 0.0 for lv in found.levels), default=None) if found else None
    e.metric(t("arrivals.metric_client"), f"{worst:.2f} ms" if worst is not None else "–")


def draw(runs: Sequence[RunView[ar.ArrivalLevel]], t: Texts, key: str) -> None:
    rows = [r for r in runs[0].rows if isinstance(r, ar.ArrivalLevel)]
    metrics(rows, t, float(ttft_target), float(itl_target))
    left, right = st.columns(2)
    for column, chart, name in ((left, ttft_chart(runs, t), "ttft"), (right, split_chart(runs, t), "split"),
                                (left, goodput_chart(runs, t, float(ttft_target), float(itl_target)), "goodput"),
                                (right, timeline_chart(runs, t), "timeline")):
        if chart is not None:
            column.altair_chart(chart, width="stretch", key=f"arrivals-{name}-{key}")
    for level in rows:
        if level.errors:
            st.warning(t("arrivals.failed_level", rate=level.rate, errors=level.errors, total=level.requests,
                         error=level.error))
        if level.cut:
            st.caption(t("arrivals.cut_level", rate=level.rate, cut=level.cut, total=level.requests,
                         drain=ar.DRAIN * level.duration_s))
    explain(t, ar.ID, runs[0])


def plan_note(t: Texts, settings: ar.Settings) -> None:
    """What the run sends and, on an API, what it costs at the price lens's list prices."""
    plan = ar.plan(settings)
    requests = plan.requests
    minutes = len(settings.rates) * settings.duration_s * (1 + ar.DRAIN) / 60
    st.caption(t("arrivals.plan", requests=requests, tokens=plan.tokens, minutes=minutes))
    if not local_backend():
        costs = [(requests * settings.prompt_tokens * p.input_per_mtok + requests * settings.output_tokens
                  * p.output_per_mtok) / 1e6 for p in PRICE_LISTS]
        st.info(t.rich("arrivals.api", requests=requests, tokens=plan.tokens, low=min(costs), high=max(costs)),
                icon=":material/payments:")


def capacity_note(t: Texts, settings: ar.Settings) -> None:
    capacity = ar.predicted_capacity(settings)
    if capacity is None or not settings.prefill_tps or not settings.decode_tps:
        st.caption(t("arrivals.no_capacity"))
        return
    st.markdown(t.rich("arrivals.capacity", capacity=capacity, prompt=settings.prompt_tokens,
                       prefill=settings.prefill_tps, decode_steps=max(settings.output_tokens - 1, 0),
                       decode=settings.decode_tps, seconds=1 / capacity), unsafe_allow_html=True)


t = texts()
st.title(t("arrivals.title"))
st.markdown(t.rich("arrivals.idea"), unsafe_allow_html=True)
st.caption(t("arrivals.arrivals_note"))
demo = hosted()  # its admission refuses a faster rate or more open streams whatever this page offers
choices = RATES if local_backend() else [r for r in API_RATES if demo.max_rate is None or r <= demo.max_rate]
st.session_state["arrivals_rates"] = [r for r in st.session_state["arrivals_rates"] if r in choices]
with st.expander(t("common.settings"), expanded=True):
    rates = sorted(st.multiselect(t("arrivals.rates"), choices, key="arrivals_rates", help=t("arrivals.rates_help"),
                                  placeholder=t("common.choose")))
    left, middle, right = st.columns(3)
    duration = left.select_slider(t("arrivals.duration_s"), [5.0, 10.0, 20.0, 30.0, 60.0], key="arrivals_duration_s")
    prompt_tokens = middle.select_slider(t("arrivals.prompt_tokens"), [50, 100, 200, 400], key="arrivals_prompt_tokens")
    output_tokens = right.select_slider(t("arrivals.output_tokens"), [8, 16, 32, 64], key="arrivals_output_tokens")
    left, middle, right = st.columns(3)
    ttft_target = left.number_input(t("arrivals.ttft_target"), 10.0, 60_000.0, step=100.0,
                                    key="arrivals_ttft_target_ms")
    itl_target = middle.number_input(t("arrivals.itl_target"), 1.0, 5_000.0, step=10.0, key="arrivals_itl_target_ms")
    seed = right.number_input(t("arrivals.seed"), 0, 1_000_000, key="arrivals_seed", help=t("arrivals.seed_help"))

settings = ar.Settings(tuple(rates), float(duration), int(prompt_tokens), int(output_tokens),
                       int(seed), float(ttft_target), float(itl_target))
m = measured(quiet=True)  # a prediction: never from a disturbed run's rates
decode = m.decode_tps or (m.batch.first.aggregate_decode_tps if m.batch else None)
if m.prefill_tps and decode:  # experiments 1 and 2 (or 4 at its smallest N) of this session, or saved
    settings = ar.with_rates(settings, m.prefill_tps, decode)
if demo.hosted:
    settings = replace(settings, max_open=demo.max_concurrency)
    st.caption(t("arrivals.hosted_cap", open=demo.max_concurrency, rate=demo.max_rate))
capacity_note(t, settings)
plan_note(t, settings)
show_run(run_controls(ExperimentPlan.of(EXPERIMENTS[ar.ID], settings)), draw, ar.ID, LEVELS)
