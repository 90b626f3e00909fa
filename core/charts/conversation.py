"""Experiment 7's charts: the prompt's size, what each round recomputed against what was cached (and the
prediction), the cumulative prefill time and money per strategy, and the pause's three TTFTs.

Recomputed tokens wear the prefill colour and cached ones the cache-hit colour; strategies get the neutral series.
"""

from __future__ import annotations

import altair as alt
import pandas as pd

from core.charts.base import Runs, frame
from core.charts.palette import CACHE_HIT, PREFILL, SERIES
from core.experiments import conversation as ex
from core.experiments.prices import PRICE_LISTS, input_cost
from core.words import Words


def _rounds(runs: Runs, t: Words) -> pd.DataFrame:
    """The strategies' rounds (not the pause's), with the strategies' names in ``t``'s language."""
    df = frame(runs, ex.ID)
    if df.empty:
        return df
    df = df[df["strategy"].isin(ex.STRATEGIES)]
    names = {s: t(f"conversation.strategy.{s}") for s in df["strategy"].unique()}
    return df.assign(name=df["strategy"].map(names))


def _colour(df: pd.DataFrame) -> alt.Color:
    names = list(dict.fromkeys(df["name"]))
    return alt.Color("name:N", title=None, sort=names, scale=alt.Scale(domain=names, range=SERIES[: len(names)]),
                     legend=alt.Legend(orient="bottom", columns=3))


def _lines(df: pd.DataFrame, y: str, title: str, y_title: str, t: Words, runs: Runs, fmt: str) -> alt.Chart:
    return (alt.Chart(df).mark_line(point=True).encode(
        x=alt.X("round:Q", title=t("conversation.x_round"), axis=alt.Axis(tickMinStep=1)),
        y=alt.Y(f"{y}:Q", title=y_title), color=_colour(df),
        strokeDash=alt.StrokeDash("run:N", title=None) if len(runs) > 1 else alt.Undefined,
        tooltip=["run", "name", "round", alt.Tooltip(f"{y}:Q", format=fmt)],
    ).properties(title=title, height=260))


def prompt_chart(runs: Runs, t: Words) -> alt.Chart | None:
    df = _rounds(runs, t)
    if df.empty or df["prompt_tokens"].isna().all():
        return None
    return _lines(df, "prompt_tokens", t("conversation.chart_prompt"), t("conversation.y_tokens"), t, runs, ",")


def recomputed_chart(runs: Runs, t: Words) -> alt.FacetChart | None:
    """The current run: per strategy, each round's recomputed and cached tokens stacked (the prompt), the
    prediction as a dot on the recomputed part."""
    df = _rounds(runs[:1], t)
    if df.empty or df["recomputed_tokens"].isna().all():
        return None
    kinds = {"recomputed_tokens": t("cache.recomputed"), "cached_tokens": t("cache.reused")}
    long = df.melt(id_vars=["name", "round", "predicted_recomputed"], value_vars=list(kinds), var_name="kind",
                   value_name="tokens")
    long = long.assign(order=long["kind"].map({"recomputed_tokens": 0, "cached_tokens": 1}),
                       kind=long["kind"].map(kinds))
    base = alt.Chart().encode(x=alt.X("round:O", title=t("conversation.x_round"), axis=alt.Axis(labelAngle=0)))
    bars = base.mark_bar().encode(
        y=alt.Y("tokens:Q", title=t("conversation.y_tokens"), stack="zero"), order="order:Q",
        color=alt.Color("kind:N", title=None, sort=list(kinds.values()),
                        scale=alt.Scale(domain=list(kinds.values()), range=[PREFILL, CACHE_HIT]),
                        legend=alt.Legend(orient="bottom")),
        tooltip=["name", "round", "kind", alt.Tooltip("tokens:Q", format=",")])
    dots = base.mark_point(shape="diamond", filled=True, color="black", size=30).encode(
        y="predicted_recomputed:Q",
        tooltip=["name", "round", alt.Tooltip("predicted_recomputed:Q", title=t("conversation.predicted"))],
    ).transform_filter(alt.datum.order == 0)
    return alt.layer(bars, dots, data=long).properties(width=220, height=200).facet(
        facet=alt.Facet("name:N", title=None, sort=list(dict.fromkeys(df["name"]))), columns=3,
        title=t("conversation.chart_recomputed"))


def time_chart(runs: Runs, t: Words) -> alt.Chart | None:
    df = _rounds(runs, t)
    if df.empty:
        return None
    ms = df["prefill_ms"].fillna(df["ttft_ms"])
    df = df.assign(ms=ms).dropna(subset=["ms"]).sort_values(["run", "strategy", "round"])
    df = df.assign(seconds=df.groupby(["run", "strategy"])["ms"].cumsum() / 1000)
    return _lines(df, "seconds", t("conversation.chart_time"), t("conversation.y_seconds"), t, runs, ",.1f")


def cost_chart(runs: Runs, t: Words) -> alt.Chart | None:
    """The cumulative prompt cost on the first price list, for the strategies a provider can run."""
    price = PRICE_LISTS[0]
    df = _rounds(runs, t)
    if df.empty:
        return None
    df = df[df["strategy"].isin(ex.EXACT_PREFIX)].sort_values(["run", "strategy", "round"])
    usd = [input_cost(price, _int(p), _int(c)) for p, c in zip(df["prompt_tokens"], df["cached_tokens"], strict=True)]
    df = df.assign(usd=usd).dropna(subset=["usd"])
    if df.empty:
        return None
    df = df.assign(usd=df.groupby(["run", "strategy"])["usd"].cumsum())
    return _lines(df, "usd", t("conversation.chart_cost", provider=f"{price.provider} {price.model}"),
                  t("conversation.y_usd"), t, runs, ",.4f")


def _int(value: object) -> int | None:
    return None if value is None or pd.isna(value) else int(value)  # type: ignore[call-overload]


def pause_chart(runs: Runs, t: Words) -> alt.Chart | None:
    """The current run's three resumes: cache in the slot, restored, gone."""
    df = frame(runs[:1], ex.ID)
    if df.empty:
        return None
    df = df[df["strategy"].isin(ex.RESUME)].dropna(subset=["ttft_ms"])
    if df.empty:
        return None
    labels = [t(f"conversation.strategy.{s}") for s in ex.RESUME]
    df = df.assign(name=df["strategy"].map(dict(zip(ex.RESUME, labels, strict=True))))
    return alt.Chart(df).mark_bar().encode(
        x=alt.X("name:N", title=None, sort=labels, axis=alt.Axis(labelAngle=0)),
        y=alt.Y("ttft_ms:Q", title=t("conversation.y_ttft")),
        color=alt.Color("name:N", legend=None, scale=alt.Scale(domain=labels, range=[CACHE_HIT, CACHE_HIT, PREFILL])),
        opacity=alt.Opacity("name:N", legend=None, scale=alt.Scale(domain=labels, range=[1.0, 0.6, 1.0])),
        tooltip=["name", alt.Tooltip("ttft_ms:Q", format=",.0f"), "prompt_tokens", "recomputed_tokens",
                 "cached_tokens"],
    ).properties(title=t("conversation.chart_pause"), height=240)


def charts(runs: Runs, t: Words) -> list[alt.TopLevelMixin]:
    """Experiment 7's charts (the page and the report)."""
    found = (prompt_chart(runs, t), recomputed_chart(runs, t), time_chart(runs, t), cost_chart(runs, t),
             pause_chart(runs, t))
    return [chart for chart in found if chart is not None]
