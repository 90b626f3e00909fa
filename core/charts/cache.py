"""Experiment 3's charts: recomputed against reused prompt tokens, and TTFT, round by round per strategy."""

from __future__ import annotations

import altair as alt
import pandas as pd

from core.charts.base import Runs, frame
from core.charts.palette import CACHE_HIT, PREFILL, SERIES
from core.experiments import prefix_cache
from core.words import Words


def _strategy_names(t: Words, df: pd.DataFrame) -> pd.DataFrame:
    names = {s: t(f"strategy.{s}") for s in df["strategy"].unique()}  # once per strategy, not per row
    return df.assign(strategy=df["strategy"].map(names))


def cache_token_chart(runs: Runs, t: Words) -> alt.Chart | None:
    df = frame(runs, prefix_cache.ID)
    if df.empty or df["recomputed_tokens"].isna().all():
        return None
    kinds = {"recomputed_tokens": t("cache.recomputed"), "cached_tokens": t("cache.reused")}
    long = _strategy_names(t, df).melt(
        id_vars=["run", "strategy", "round"], value_vars=list(kinds), var_name="kind", value_name="tokens"
    )
    long = long.assign(kind=long["kind"].map(kinds))
    chart = (
        alt.Chart(long)
        .mark_bar()
        .encode(
            x=alt.X("round:O", title=t("cache.x"), axis=alt.Axis(labelAngle=0)),
            xOffset=alt.XOffset("kind:N", sort=list(kinds.values())),
            y=alt.Y("tokens:Q", title=t("cache.y_tokens")),
            color=alt.Color(
                "kind:N",
                title=None,
                sort=list(kinds.values()),
                scale=alt.Scale(domain=list(kinds.values()), range=[PREFILL, CACHE_HIT]),
                legend=alt.Legend(orient="bottom"),
            ),
            tooltip=["run", "strategy", "round", "kind", alt.Tooltip("tokens:Q", format=",")],
        )
        .properties(width=260, height=260)
    )
    row = alt.Row("run:N", title=None) if len(runs) > 1 else alt.Undefined
    return chart.facet(column=alt.Column("strategy:N", title=None), row=row)


def cache_ttft_chart(runs: Runs, t: Words) -> alt.Chart | None:
    df = frame(runs, prefix_cache.ID)
    if df.empty:
        return None
    df = _strategy_names(t, df)
    names = list(dict.fromkeys(df["strategy"]))
    return (
        alt.Chart(df)
        .mark_line(point=True)
        .encode(
            x=alt.X("round:O", title=t("cache.x"), axis=alt.Axis(labelAngle=0)),
            y=alt.Y("ttft_ms:Q", title=t("cache.y_ms")),
            color=alt.Color(
                "strategy:N",
                title=None,
                scale=alt.Scale(domain=names, range=SERIES[: len(names)]),
                legend=alt.Legend(orient="bottom"),
            ),
            strokeDash=alt.StrokeDash("run:N", title=None) if len(runs) > 1 else alt.Undefined,
            tooltip=["run", "strategy", "round", alt.Tooltip("ttft_ms:Q", format=",.0f"), "recomputed_tokens"],
        )
        .properties(title=t("cache.chart_ttft"), height=280)
    )


def charts(runs: Runs, t: Words) -> list[alt.TopLevelMixin]:
    """Experiment 3's charts, every run on each (the page and the report)."""
    return [chart for chart in (cache_token_chart(runs, t), cache_ttft_chart(runs, t)) if chart is not None]
