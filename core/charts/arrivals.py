"""Altair charts for experiment 8 (requests arriving over time), coloured with `core.charts.palette`.

Each builder takes runs (`RunView`: a label and its levels), the current run first; earlier runs are drawn dashed beside
it. The capacity (predicted, or read off the run) is a vertical rule. Nothing here calls Streamlit.
"""

from __future__ import annotations

from collections.abc import Sequence

import altair as alt
import pandas as pd

from core.charts.base import RunView
from core.charts.palette import CACHE_HIT, DECODE, PREFILL, SERIES
from core.experiments.arrivals import PARTS, ArrivalLevel, goodput, summarize
from core.words import Words

LevelRuns = Sequence[RunView[ArrivalLevel]]
PART_COLOURS = {"client": SERIES[0], "network": SERIES[2], "queue": DECODE, "prefill": PREFILL, "server": SERIES[4],
                "rest": SERIES[5]}


def _levels(runs: LevelRuns) -> list[tuple[str, ArrivalLevel]]:
    return [(run.label, level) for run in runs for level in run.rows
            if isinstance(level, ArrivalLevel) and level.ttft_p50_ms is not None]


def _dash(runs: LevelRuns) -> alt.StrokeDash | alt.UndefinedType:
    labels = [run.label for run in runs]
    return alt.StrokeDash("run:N", title=None, scale=alt.Scale(domain=labels),
                          legend=alt.Legend(orient="bottom")) if len(labels) > 1 else alt.Undefined


def _x(t: Words) -> alt.X:
    return alt.X("rate:Q", title=t("arrivals.x_rate"), scale=alt.Scale(zero=True))


def capacity_rule(runs: LevelRuns, t: Words) -> alt.LayerChart | None:
    """The current run's capacity as a vertical rule with its label; None when it has none."""
    found = summarize(runs[0].rows) if runs else None
    if found is None or not found.capacity:
        return None
    data = pd.DataFrame([{"rate": found.capacity, "label": t("arrivals.capacity_mark", capacity=found.capacity)}])
    base = alt.Chart(data).encode(x="rate:Q")
    return base.mark_rule(color=CACHE_HIT, strokeDash=[6, 3], strokeWidth=2) + base.mark_text(
        align="left", dx=4, dy=-4, baseline="bottom", color=CACHE_HIT).encode(y=alt.value(0), text="label:N")


def ttft_chart(runs: LevelRuns, t: Words) -> alt.LayerChart | None:
    """TTFT p50, p90 and p99 against the arrival rate, the capacity marked."""
    rows = [{"run": label, "rate": lv.rate, "percentile": f"p{p}", "ms": getattr(lv, f"ttft_p{p}_ms"),
             "cut": lv.cut, "requests": lv.requests} for label, lv in _levels(runs) for p in (50, 90, 99)]
    if not rows:
        return None
    percentiles = ["p50", "p90", "p99"]
    lines = alt.Chart(pd.DataFrame(rows)).mark_line(point=alt.OverlayMarkDef(size=60, filled=True)).encode(
        x=_x(t), y=alt.Y("ms:Q", title=t("arrivals.y_ms")),
        color=alt.Color("percentile:N", title=None, sort=percentiles, legend=alt.Legend(orient="bottom"),
                        scale=alt.Scale(domain=percentiles, range=[SERIES[0], SERIES[2], SERIES[3]])),
        strokeDash=_dash(runs),
        tooltip=["run", "rate", "percentile", alt.Tooltip("ms:Q", format=",.0f"), "requests", "cut"])
    rule = capacity_rule(runs, t)
    return alt.LayerChart(layer=[lines, *([rule] if rule is not None else [])], title=t("arrivals.chart_ttft"),
                          height=300)


def split_chart(runs: LevelRuns, t: Words) -> alt.Chart | None:
    """The current run's mean TTFT per rate, stacked: client, network, queue, prefill, server, rest (parts not
    reported are left out; the rest then holds them)."""
    names = {part: t(f"arrivals.part_{part}") for part in PARTS}
    rows = [{"rate": f"{lv.rate:g}", "part": names[part], "order": i, "ms": getattr(lv, f"{part}_mean_ms")}
            for _, lv in _levels(runs[:1]) for i, part in enumerate(PARTS)
            if getattr(lv, f"{part}_mean_ms") is not None]
    if not rows:
        return None
    order = [f"{lv.rate:g}" for _, lv in _levels(runs[:1])]
    return alt.Chart(pd.DataFrame(rows)).mark_bar().encode(
        x=alt.X("rate:N", title=t("arrivals.x_rate"), sort=order),
        y=alt.Y("ms:Q", title=t("arrivals.y_ms"), stack="zero"),
        color=alt.Color("part:N", title=None, sort=list(names.values()), legend=alt.Legend(orient="bottom"),
                        scale=alt.Scale(domain=list(names.values()), range=[PART_COLOURS[p] for p in PARTS])),
        order=alt.Order("order:Q"),
        tooltip=["rate", "part", alt.Tooltip("ms:Q", format=",.1f")],
    ).properties(title=t("arrivals.chart_split"), height=300)


def goodput_chart(runs: LevelRuns, t: Words, ttft_target_ms: float | None = None,
                  itl_target_ms: float | None = None) -> alt.LayerChart | None:
    """The share of each rate's requests meeting both targets (the reader's, else the ones recorded with the run)."""
    rows = []
    for label, lv in _levels(runs):
        ttft = ttft_target_ms or lv.ttft_target_ms or 0.0
        itl = itl_target_ms or lv.itl_target_ms or 0.0
        good, per_second = goodput(lv, ttft, itl)
        rows.append({"run": label, "rate": lv.rate, "share": 100 * good / lv.requests if lv.requests else 0.0,
                     "good": good, "requests": lv.requests, "per_second": per_second})
    if not rows:
        return None
    point = alt.OverlayMarkDef(size=60, filled=True)
    line = alt.Chart(pd.DataFrame(rows)).mark_line(color=CACHE_HIT, point=point).encode(
        x=_x(t), y=alt.Y("share:Q", title=t("arrivals.y_good"), scale=alt.Scale(domain=[0, 100])),
        strokeDash=_dash(runs),
        tooltip=["run", "rate", "good", "requests", alt.Tooltip("share:Q", format=".0f"),
                 alt.Tooltip("per_second:Q", format=".2f")])
    rule = capacity_rule(runs, t)
    return alt.LayerChart(layer=[line, *([rule] if rule is not None else [])], title=t("arrivals.chart_goodput"),
                          height=260)


def timeline_chart(runs: LevelRuns, t: Words) -> alt.Chart | None:
    """The current run's requests: TTFT against when each was scheduled, one colour per rate (past the capacity
    it climbs for as long as the rate lasts)."""
    rows = [{"rate": f"{lv.rate:g}", "scheduled": s.scheduled_s, "ms": s.ttft_ms if s.ttft_ms is not None
             else s.waited_ms, "cut": s.cut} for _, lv in _levels(runs[:1]) for s in lv.streams
            if s.ttft_ms is not None or s.waited_ms is not None]
    if not rows:
        return None
    order = [str(rate) for rate in dict.fromkeys(r["rate"] for r in rows)]
    return alt.Chart(pd.DataFrame(rows)).mark_line(point=True, strokeWidth=1).encode(
        x=alt.X("scheduled:Q", title=t("arrivals.x_scheduled")), y=alt.Y("ms:Q", title=t("arrivals.y_ms")),
        color=alt.Color("rate:N", title=t("arrivals.rate"), sort=order, legend=alt.Legend(orient="bottom"),
                        scale=alt.Scale(domain=order, range=SERIES[: len(order)] if len(order) <= len(SERIES)
                                        else alt.Undefined)),
        tooltip=["rate", alt.Tooltip("scheduled:Q", format=".2f"), alt.Tooltip("ms:Q", format=",.0f"), "cut"],
    ).properties(title=t("arrivals.chart_timeline"), height=260)


def charts(runs: LevelRuns, t: Words) -> list[alt.TopLevelMixin]:
    """Experiment 8's charts over every run (the report; the page draws the same with the reader's targets)."""
    return [chart for chart in (ttft_chart(runs, t), split_chart(runs, t), goodput_chart(runs, t),
                                timeline_chart(runs, t)) if chart is not None]
