"""Altair charts for the pages, coloured with `ui.palette` (no Streamlit here).

Each builder takes ``runs``: `ui.contract.RunView`s, the current run first, so earlier runs can be
drawn on the same chart for comparison.
"""

from __future__ import annotations

from collections.abc import Sequence

import altair as alt
import pandas as pd

from core.experiments import input_length, output_length, prefix_cache
from core.experiments.batch import nearest_rank
from core.records import RoundResult
from ui.content import Texts
from ui.contract import RunView
from ui.palette import CACHE_HIT, DECODE, PREFILL, SERIES

Runs = Sequence[RunView[RoundResult]]


def _frame(runs: Runs, experiment: str) -> pd.DataFrame:
    records = [{**row.to_dict(), "run": run.label} for run in runs for row in run.rows
               if row.experiment == experiment and not row.error]
    return pd.DataFrame.from_records(records)


def _run_colour(runs: Runs, single: str) -> alt.Color | alt.Value:
    """One run: its phase colour. Several: a colour per run (the legend says which)."""
    if len(runs) < 2:
        return alt.value(single)
    labels = [run.label for run in runs]
    return alt.Color("run:N", title=None, scale=alt.Scale(domain=labels, range=SERIES[: len(labels)]),
                     legend=alt.Legend(orient="bottom"))


def _spread(df: pd.DataFrame, x: str, y: str, colour: alt.Color | alt.Value) -> alt.LayerChart | None:
    """Repeats of one point: a rule from the fastest to the p90 and a tick at the p50 (nearest rank).

    None when no point was repeated: a single number has no spread to show.
    """
    groups = df.dropna(subset=[y]).groupby(["run", "target_tokens"])[[x, y]]
    if df.empty or groups.size().max() < 2:
        return None
    stats = pd.DataFrame([{"run": run, x: part[x].median(), "low": part[y].min(), "n": len(part),
                           "p50": nearest_rank(list(part[y]), 50), "p90": nearest_rank(list(part[y]), 90)}
                          for (run, _), part in groups if len(part) > 1])
    base = alt.Chart(stats).encode(x=alt.X(f"{x}:Q"), color=colour, tooltip=[
        "run", x, "n", alt.Tooltip("p50:Q", format=",.1f"), alt.Tooltip("p90:Q", format=",.1f")])
    return base.mark_rule(strokeWidth=2, opacity=0.5).encode(y="low:Q", y2="p90:Q") + base.mark_tick(
        thickness=3, size=18).encode(y="p50:Q")


def input_chart(runs: Runs, t: Texts) -> alt.Chart | None:
    df = _frame(runs, input_length.ID)
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
        color=_run_colour(runs, PREFILL),
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
    spread = _spread(df, "prompt_tokens", "ttft_ms", _run_colour(runs, PREFILL))  # TTFT over repeats: p50, p90
    chart = points + fit if spread is None else points + fit + spread
    return chart.properties(title=t("input.chart_title"), height=320)


def output_charts(runs: Runs, t: Texts) -> tuple[alt.Chart, alt.Chart] | None:
    df = _frame(runs, output_length.ID)
    if df.empty:
        return None
    colour = _run_colour(runs, DECODE)
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
    total_spread = _spread(df, "output_tokens", "total_ms", colour)
    per_token_spread = _spread(df, "output_tokens", "ms_per_output_token", colour)
    if total_spread is not None and per_token_spread is not None:  # repeats: p50 and p90 at each length
        total_chart, per_token = total_chart + total_spread, per_token + per_token_spread
    return (
        total_chart.properties(title=t("output.chart_title"), height=300),
        per_token.properties(title=t("output.chart_per_token"), height=300),
    )


def _strategy_names(t: Texts, df: pd.DataFrame) -> pd.DataFrame:
    names = {s: t.plain(f"strategy.{s}") for s in df["strategy"].unique()}  # once per strategy, not per row
    return df.assign(strategy=df["strategy"].map(names))


def cache_token_chart(runs: Runs, t: Texts) -> alt.Chart | None:
    df = _frame(runs, prefix_cache.ID)
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


def cache_ttft_chart(runs: Runs, t: Texts) -> alt.Chart | None:
    df = _frame(runs, prefix_cache.ID)
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


def timeline_chart(
    prompt_tokens: int, output_tokens: int, prefill_tps: float, decode_tps: float, t: Texts
) -> alt.Chart:
    """One request to scale: a single prefill block, then one thin block per output token."""
    prefill_ms = prompt_tokens / prefill_tps * 1000
    step = 1000 / decode_tps
    rows = [{"phase": t("phase.prefill"), "start": 0.0, "end": prefill_ms, "label": f"{prompt_tokens:,} tokens"}]
    rows += [
        {
            "phase": t("phase.decode"),
            "start": prefill_ms + i * step,
            "end": prefill_ms + (i + 1) * step - step * 0.15,
            "label": f"token {i + 1}",
        }
        for i in range(output_tokens)
    ]
    domain = [t("phase.prefill"), t("phase.decode")]
    return (
        alt.Chart(pd.DataFrame(rows))
        .mark_bar()
        .encode(
            x=alt.X("start:Q", title="ms"),
            x2="end:Q",
            y=alt.Y("phase:N", title=None, sort=domain),
            color=alt.Color("phase:N", scale=alt.Scale(domain=domain, range=[PREFILL, DECODE]), legend=None),
            tooltip=["phase", "label", alt.Tooltip("start:Q", format=",.1f"), alt.Tooltip("end:Q", format=",.1f")],
        )
        .properties(height=alt.Step(40))
    )


def prefix_diagram(t: Texts, slices: int = 12) -> alt.Chart:
    """Round 2 of two conversations, slice by slice: reused (cache hit) or recomputed (prefill)."""
    reused, recomputed = t("cache.reused"), t("cache.recomputed")
    rows = []
    for strategy in ("append_only", "timestamp_first"):
        for i in range(slices + 1):
            new_tail = i == slices
            hit = strategy == "append_only" and not new_tail
            rows.append(
                {"strategy": t.plain(f"strategy.{strategy}"), "slice": i, "state": reused if hit else recomputed}
            )
    return (
        alt.Chart(pd.DataFrame(rows))
        .mark_rect(stroke="white", strokeWidth=2)
        .encode(
            x=alt.X("slice:O", title=None, axis=None),
            y=alt.Y("strategy:N", title=None),
            color=alt.Color(
                "state:N",
                title=None,
                scale=alt.Scale(domain=[recomputed, reused], range=[PREFILL, CACHE_HIT]),
                legend=alt.Legend(orient="bottom"),
            ),
        )
        .properties(height=alt.Step(40))
    )
