"""Experiment 2's charts: total time and time per output token against the output's length."""

from __future__ import annotations

import altair as alt

from core.charts.base import Runs, frame, run_colour, spread
from core.charts.palette import DECODE
from core.experiments import output_length
from core.words import Words


def output_charts(runs: Runs, t: Words) -> tuple[alt.Chart, alt.Chart] | None:
    df = frame(runs, output_length.ID)
    if df.empty:
        return None
    colour = run_colour(runs, DECODE)
    total = alt.Chart(df).encode(
        x=alt.X("output_tokens:Q", title=t("output.x")),
        y=alt.Y("total_ms:Q", title=t("output.y")),
        color=colour,
        tooltip=["run", "output_tokens", alt.Tooltip("total_ms:Q", format=",.0f"), "round"],
    )
    total_chart = total.mark_point(size=70, filled=True) + total.transform_regression(
        "output_tokens", "total_ms", groupby=["run"]
    ).mark_line(strokeDash=[4, 3])
    per_token = (
        alt.Chart(df)
        .mark_line(point=True)
        .encode(
            x=alt.X("output_tokens:Q", title=t("output.x")),
            y=alt.Y("ms_per_output_token:Q", title="ms / token", scale=alt.Scale(zero=True)),
            color=colour,
            tooltip=["run", "output_tokens", alt.Tooltip("ms_per_output_token:Q", format=".2f")],
        )
    )
    total_spread = spread(df, "output_tokens", "total_ms", colour)
    per_token_spread = spread(df, "output_tokens", "ms_per_output_token", colour)
    if total_spread is not None and per_token_spread is not None:  # repeats: p50 and p90 at each length
        total_chart, per_token = total_chart + total_spread, per_token + per_token_spread
    return (
        total_chart.properties(title=t("output.chart_title"), height=300),
        per_token.properties(title=t("output.chart_per_token"), height=300),
    )


def charts(runs: Runs, t: Words) -> list[alt.TopLevelMixin]:
    """Experiment 2's charts, every run on each (the page and the report)."""
    return list(output_charts(runs, t) or ())
