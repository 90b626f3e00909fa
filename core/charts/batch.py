"""Altair charts for experiment 4 (many requests at once), coloured with `core.charts.palette`.

Each builder takes runs as ``(label, levels)`` pairs, the current run first; earlier runs are drawn
dashed beside it. Nothing here calls Streamlit.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import altair as alt
import pandas as pd

from core.charts.base import RunView
from core.charts.palette import DECODE, PREFILL, SERIES
from core.experiments.batch import BatchLevel
from core.words import Words

LevelRuns = Sequence[RunView[BatchLevel]]


def _frame(runs: LevelRuns) -> pd.DataFrame:
    records = [{**{k: v for k, v in level.to_dict().items() if k != "streams"}, "run": run.label}
               for run in runs for level in run.rows
               if level.aggregate_decode_tps or level.aggregate_prefill_tps]
    return pd.DataFrame.from_records(records)


def _x(t: Words, df: pd.DataFrame) -> alt.X:
    levels = sorted(int(n) for n in df["concurrency"].unique())
    return alt.X("concurrency:Q", title=t("batch.x"), scale=alt.Scale(type="log", base=2, nice=False),
                 axis=alt.Axis(values=levels, format="d"))


def _run_dash(runs: LevelRuns) -> alt.StrokeDash | alt.UndefinedType:
    labels = [run.label for run in runs]
    return alt.StrokeDash("run:N", title=None, scale=alt.Scale(domain=labels),
                          legend=alt.Legend(orient="bottom")) if len(labels) > 1 else alt.Undefined


def throughput_chart(runs: LevelRuns, t: Words) -> alt.Chart | None:
    """Aggregate decode, per-stream decode (with its min-max spread) and aggregate prefill against N."""
    df = _frame(runs)
    if df.empty:
        return None
    series = {"aggregate_decode_tps": t("batch.series_decode"), "per_stream_decode_tps": t("batch.series_stream"),
              "aggregate_prefill_tps": t("batch.series_prefill")}
    long = df.melt(id_vars=["run", "concurrency"], value_vars=list(series), var_name="series", value_name="tps")
    long = long.dropna(subset=["tps"]).assign(series=lambda d: d["series"].map(series))
    names = list(series.values())
    colour = alt.Color("series:N", title=None, sort=names, legend=alt.Legend(orient="bottom"),
                       scale=alt.Scale(domain=names, range=[DECODE, SERIES[1], PREFILL]))
    lines = alt.Chart(long).mark_line(point=alt.OverlayMarkDef(size=70, filled=True)).encode(
        x=_x(t, df), y=alt.Y("tps:Q", title=t("batch.y_tps"), scale=alt.Scale(zero=True)), color=colour,
        strokeDash=_run_dash(runs),
        tooltip=["run", "series", "concurrency", alt.Tooltip("tps:Q", format=",.1f")])
    with_spread = df.dropna(subset=["per_stream_decode_tps_min"])
    spread = alt.Chart(with_spread).mark_rule(color=SERIES[1], strokeWidth=2).encode(
        x=_x(t, df), y="per_stream_decode_tps_min:Q", y2="per_stream_decode_tps_max:Q",
        tooltip=["run", "concurrency", alt.Tooltip("per_stream_decode_tps_min:Q", title="min", format=",.1f"),
                 alt.Tooltip("per_stream_decode_tps_max:Q", title="max", format=",.1f")])
    return (lines + spread).properties(title=t("batch.chart_throughput"), height=320)


def latency_chart(runs: LevelRuns, t: Words) -> alt.Chart | None:
    """TTFT and inter-token latency percentiles (p50, p90, p99) against N, side by side."""
    df = _frame(runs)
    if df.empty:
        return None
    columns = {f"{kind}_p{p}_ms": (t(f"batch.{kind}"), f"p{p}") for kind in ("ttft", "itl") for p in (50, 90, 99)}
    long = df.melt(id_vars=["run", "concurrency"], value_vars=list(columns), var_name="column", value_name="ms")
    long = long.dropna(subset=["ms"])
    long = long.assign(metric=long["column"].map(lambda c: columns[c][0]),
                       percentile=long["column"].map(lambda c: columns[c][1]))
    percentiles = ["p50", "p90", "p99"]
    chart = alt.Chart(long).mark_line(point=True).encode(
        x=_x(t, df), y=alt.Y("ms:Q", title=t("batch.y_ms")),
        color=alt.Color("percentile:N", title=None, sort=percentiles,
                        scale=alt.Scale(domain=percentiles, range=[SERIES[0], SERIES[2], SERIES[3]]),
                        legend=alt.Legend(orient="bottom")),
        strokeDash=_run_dash(runs),
        tooltip=["run", "metric", "percentile", "concurrency", alt.Tooltip("ms:Q", format=",.1f")],
    ).properties(width=280, height=240)
    return chart.facet(column=alt.Column("metric:N", title=None)).resolve_scale(y="independent").properties(
        title=t("batch.chart_latency"))


def streams_chart(level: BatchLevel, t: Words) -> alt.Chart | None:
    """One level's requests on one time axis: waiting for the first token, then streaming; overlap shows batching."""
    waiting, streaming = t("batch.waiting"), t("batch.streaming")
    rows: list[dict[str, Any]] = []
    for phase in ("prefill", "decode"):
        streams = [s for s in level.streams if s.phase == phase]
        for index, stream in enumerate(streams, start=1):
            name = f"{t(f'batch.phase_{phase}')} {index}"
            first = stream.first_token_s if stream.first_token_s is not None else stream.end_s
            rows.append({"request": name, "part": waiting, "start": stream.start_s * 1000, "end": first * 1000,
                         "error": stream.error})
            if stream.first_token_s is not None:
                rows.append({"request": name, "part": streaming, "start": first * 1000, "end": stream.end_s * 1000,
                             "error": stream.error})
    if not rows:
        return None
    order = list(dict.fromkeys(r["request"] for r in rows))
    return alt.Chart(pd.DataFrame(rows)).mark_bar().encode(
        x=alt.X("start:Q", title=t("batch.x_since_start")), x2="end:Q",
        y=alt.Y("request:N", title=None, sort=order),
        color=alt.Color("part:N", title=None, scale=alt.Scale(domain=[waiting, streaming], range=[PREFILL, DECODE]),
                        legend=alt.Legend(orient="bottom")),
        tooltip=["request", "part", alt.Tooltip("start:Q", format=",.0f"), alt.Tooltip("end:Q", format=",.0f"),
                 "error"],
    ).properties(title=t("batch.chart_streams", n=level.concurrency), height=alt.Step(22))


def charts(runs: LevelRuns, t: Words) -> list[alt.TopLevelMixin]:
    """Experiment 4's charts over every run (the report; the page adds the last level's streams)."""
    return [chart for chart in (throughput_chart(runs, t), latency_chart(runs, t)) if chart is not None]
