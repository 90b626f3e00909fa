"""Experiment 6's charts (Altair, no Streamlit): the page draws them and the report embeds ``to_dict()``.

The cached way wears the decode colour (one token computed per step), the recomputed way the prefill colour
(the whole context computed again); a prediction is the same colour, dashed.
"""

from __future__ import annotations

from collections.abc import Sequence

import altair as alt
import pandas as pd

from core.charts.base import RunView
from core.charts.palette import DECODE, PREFILL, SERIES
from core.experiments import kv_cache as kv
from core.words import Words

COLOURS = {kv.CACHED: DECODE, kv.RECOMPUTED: PREFILL}


def _ways(t: Words) -> tuple[dict[str, str], alt.Color]:
    names = {way: t(f"kv_cache.way_{way}") for way in kv.WAYS}
    scale = alt.Scale(domain=list(names.values()), range=[COLOURS[w] for w in names])
    return names, alt.Color("way:N", title=None, scale=scale, legend=alt.Legend(orient="bottom"))


def _frame(records: Sequence[kv.KvStep], names: dict[str, str]) -> pd.DataFrame:
    """One row per step, way and kind (measured, predicted), with the running total in seconds."""
    rows = [{"way": names[r.way], "kind": kind, "step": r.step, "context": r.context,
             "computed_tokens": r.computed_tokens, "step_ms": ms}
            for r in records if not r.error and r.way in names
            for kind, ms in (("measured", r.step_ms), ("predicted", r.predicted_ms)) if ms is not None]
    df = pd.DataFrame.from_records(rows)
    if df.empty:
        return df
    df = df.sort_values(["kind", "way", "step"])
    df["total_s"] = df.groupby(["kind", "way"])["step_ms"].cumsum() / 1000
    return df


def step_chart(records: Sequence[kv.KvStep], t: Words) -> alt.LayerChart | None:
    """Each step's time against its context, both ways, the prediction dashed: the recomputed steps climb with the
    context (a straight line here is the parabola of the total), the cached ones stay flat. A linear scale, so that
    the climb shows as it is; a cached step far above the others is another program's doing."""
    names, colour = _ways(t)
    df = _frame(records, names)
    if df.empty:
        return None
    base = alt.Chart(df).encode(
        x=alt.X("context:Q", title=t("kv_cache.x_context"), scale=alt.Scale(zero=False)),
        y=alt.Y("step_ms:Q", title=t("kv_cache.y_step")),
        color=colour,
        tooltip=["way", "kind", "step", "context", "computed_tokens", alt.Tooltip("step_ms:Q", format=",.1f")])
    measured = base.transform_filter(alt.datum.kind == "measured").mark_line(point=True)
    predicted = base.transform_filter(alt.datum.kind == "predicted").mark_line(strokeDash=[4, 3], opacity=0.6)
    layers = [predicted, measured]
    found = kv.summarize(records)
    if found is not None and found.contended:  # circled: the steps the conclusion counts as contention
        limit = kv.CONTENTION * found.cached_median
        hit = df[(df["kind"] == "measured") & (df["way"] == names[kv.CACHED]) & (df["step"] > 0)
                 & (df["step_ms"] > limit)]
        layers.append(alt.Chart(hit).mark_point(size=160, stroke=SERIES[3], strokeWidth=2).encode(
            x="context:Q", y="step_ms:Q", tooltip=[alt.Tooltip("step_ms:Q", format=",.1f", title=t(
                "kv_cache.contended", times=kv.CONTENTION, median=found.cached_median))]))
    return alt.LayerChart(layer=layers, title=t("kv_cache.chart_step"), height=300)


def total_chart(records: Sequence[kv.KvStep], t: Words) -> alt.LayerChart | None:
    """Cumulative time: a straight line with the cache, a parabola without (its least-squares fit dashed)."""
    names, colour = _ways(t)
    df = _frame(records, names)
    measured = df[df["kind"] == "measured"] if not df.empty else df
    if measured.empty:
        return None
    found = kv.summarize(records)
    fits = []
    if found is not None and found.recomputed_curve is not None:
        fits = [{"way": names[kv.RECOMPUTED], "step": step, "fit_s": found.recomputed_curve.at(step) / 1000}
                for step in range(found.steps + 1)]
    x = alt.X("step:Q", title=t("kv_cache.x_step"))
    points = alt.Chart(measured).mark_point(size=30, filled=True).encode(
        x=x, y=alt.Y("total_s:Q", title=t("kv_cache.y_total")), color=colour,
        tooltip=["way", "step", alt.Tooltip("total_s:Q", format=",.2f")])
    lines = [alt.Chart(pd.DataFrame(fits)).mark_line(strokeDash=[4, 3]).encode(x=x, y="fit_s:Q", color=colour)]
    return alt.LayerChart(layer=[points, *(lines if fits else [])], title=t("kv_cache.chart_total"), height=300)


def memory_chart(records: Sequence[kv.KvStep], t: Words) -> alt.Chart | None:
    """The megabytes the cache held after each step (the cached way; the recomputed way keeps none)."""
    rows = [{"step": r.step, "context": r.context, "MB": r.kv_bytes / 1e6}
            for r in records if r.way == kv.CACHED and r.kv_bytes and not r.error]
    if not rows:
        return None
    chart: alt.Chart = alt.Chart(pd.DataFrame(rows)).mark_area(color=DECODE, opacity=0.35, line=True).encode(
        x=alt.X("step:Q", title=t("kv_cache.x_step")),
        y=alt.Y("MB:Q", title=t("kv_cache.y_memory"), scale=alt.Scale(zero=True)),
        tooltip=["step", "context", alt.Tooltip("MB:Q", format=",.2f")],
    ).properties(title=t("kv_cache.chart_memory"), height=300)
    return chart


def charts(runs: Sequence[RunView[kv.KvStep]], t: Words) -> list[alt.TopLevelMixin]:
    """The current run's charts, in page order (those with nothing to draw left out): its two ways already
    fill each chart, so earlier runs are compared in their numbers, not drawn over it."""
    records = runs[0].rows if runs else []
    found = [step_chart(records, t), total_chart(records, t), memory_chart(records, t)]
    return [c for c in found if c is not None]
