"""Altair charts for the cache doctor page, coloured with `core.charts.palette` (no Streamlit here)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import altair as alt
import pandas as pd

from core.charts.palette import CACHE_HIT, PREFILL, SERIES
from core.records import RoundResult
from core.words import Words


def doctor_chart(findings: Sequence[dict[str, Any]], t: Words, replayed: Sequence[RoundResult] = ()) -> alt.Chart:
    """Recomputed tokens per round as sent (prefill colour) against an append-only version."""
    actual, ideal, measured = t("doctor.series_actual"), t("doctor.series_append"), t("doctor.measured")
    rows = [{"round": f["round"], "series": actual, "tokens": f["recomputed_tokens"]} for f in findings]
    rows += [{"round": f["round"], "series": ideal, "tokens": f["append_only_recomputed_tokens"]} for f in findings]
    rows += [{"round": r.round, "series": measured, "tokens": r.recomputed_tokens} for r in replayed
             if r.recomputed_tokens is not None and not r.error]
    domain = [actual, ideal, measured]
    return alt.Chart(pd.DataFrame(rows)).mark_line(point=True).encode(
        x=alt.X("round:O", title=t("cache.x"), axis=alt.Axis(labelAngle=0)),
        y=alt.Y("tokens:Q", title=t("cache.y_tokens")),
        color=alt.Color("series:N", title=None, scale=alt.Scale(domain=domain, range=[PREFILL, CACHE_HIT, SERIES[0]]),
                        legend=alt.Legend(orient="bottom")),
        strokeDash=alt.StrokeDash("series:N", scale=alt.Scale(domain=domain, range=[[1, 0], [5, 4], [2, 2]]),
                                  legend=None),
        tooltip=["round", "series", alt.Tooltip("tokens:Q", format=",")],
    ).properties(title=t("doctor.chart_title"), height=300)


def measured_chart(findings: Sequence[dict[str, Any]], t: Words) -> alt.Chart:
    """Cached prompt tokens per round: the provider's usage (cache-hit colour) beside the prediction."""
    measured, predicted = t("doctor_input.series_measured"), t("doctor_input.series_predicted")
    rows = [{"round": f["round"], "series": name, "tokens": f[key]} for f in findings
            if f["measured_cached_tokens"] is not None
            for name, key in ((measured, "measured_cached_tokens"), (predicted, "predicted_cached_tokens"))]
    return alt.Chart(pd.DataFrame(rows)).mark_bar().encode(
        x=alt.X("round:O", title=t("cache.x"), axis=alt.Axis(labelAngle=0)),
        xOffset="series:N",
        # whole tokens on the axis, and a domain up to 1 where every count is 0 (else Vega labels it 0.000000)
        y=alt.Y("tokens:Q", title=t("cache.y_tokens"), axis=alt.Axis(format=",d", tickMinStep=1),
                scale=alt.Scale(domainMin=0, domainMax=max([1] + [r["tokens"] or 0 for r in rows]))),
        color=alt.Color("series:N", title=None, legend=alt.Legend(orient="bottom"),
                        scale=alt.Scale(domain=[measured, predicted], range=[CACHE_HIT, SERIES[0]])),
        tooltip=["round", "series", alt.Tooltip("tokens:Q", format=",")],
    ).properties(title=t("doctor_input.measured_chart"), height=260)


def timeline_chart(findings: Sequence[dict[str, Any]], t: Words) -> alt.LayerChart:
    """The gap before each round (prefill colour: a long gap means recomputing) against the provider's cache
    lifetime, a rule across the chart."""
    rows = [{"round": f["round"], "seconds": f["gap_seconds"]} for f in findings if f["gap_seconds"] is not None]
    lifetimes = sorted({f["lifetime_seconds"] for f in findings if f["lifetime_seconds"]})
    bars = alt.Chart(pd.DataFrame(rows)).mark_bar(color=PREFILL).encode(
        x=alt.X("round:O", title=t("timeline.x"), axis=alt.Axis(labelAngle=0)),
        y=alt.Y("seconds:Q", title=t("timeline.y")),
        tooltip=["round", alt.Tooltip("seconds:Q", title=t("timeline.gap"), format=",.0f")],
    )
    lines = pd.DataFrame({"seconds": lifetimes, "label": [t("timeline.lifetime")] * len(lifetimes)})
    rule = alt.Chart(lines).mark_rule(color=CACHE_HIT, strokeDash=[5, 4], size=2).encode(
        y="seconds:Q", tooltip=["label", "seconds"])
    return alt.LayerChart(layer=[bars, rule], title=t("timeline.title"), height=240)
