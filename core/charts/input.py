"""Experiment 1's chart: TTFT and prefill time against the prompt's length."""

from __future__ import annotations

import altair as alt

from core.charts.base import Runs, frame, run_colour, spread
from core.charts.palette import PREFILL
from core.experiments import input_length
from core.words import Words


def input_chart(runs: Runs, t: Words) -> alt.Chart | None:
    df = frame(runs, input_length.ID)
    if df.empty:
        return None
    series = {"ttft_ms": t("input.series_ttft"), "prefill_ms": t("input.series_prefill")}
    long = df.melt(
        id_vars=["run", "prompt_tokens", "round"], value_vars=list(series), var_name="series", value_name="ms"
    )
    long = long.dropna(subset=["ms", "prompt_tokens"]).assign(series=lambda d: d["series"].map(series))
    base = alt.Chart(long).encode(
        x=alt.X("prompt_tokens:Q", title=t("input.x")),
        y=alt.Y("ms:Q", title=t("input.y")),
        color=run_colour(runs, PREFILL),
        shape=alt.Shape("series:N", title=None, legend=alt.Legend(orient="bottom")),
        tooltip=["run", "series", "prompt_tokens", alt.Tooltip("ms:Q", format=",.0f"), "round"],
    )
    points = base.mark_point(size=70, filled=True)
    fit = (
        base.transform_filter(alt.datum.series == series["ttft_ms"])
        .transform_regression("prompt_tokens", "ms", groupby=["run"])
        .mark_line(strokeDash=[4, 3], opacity=0.7)
        .encode(shape=alt.value(None))
    )
    repeats = spread(df, "prompt_tokens", "ttft_ms", run_colour(runs, PREFILL))  # TTFT over repeats: p50, p90
    chart = points + fit if repeats is None else points + fit + repeats
    return chart.properties(title=t("input.chart_title"), height=320)


def charts(runs: Runs, t: Words) -> list[alt.TopLevelMixin]:
    """Experiment 1's charts, every run on each (the page and the report)."""
    chart = input_chart(runs, t)
    return [] if chart is None else [chart]
