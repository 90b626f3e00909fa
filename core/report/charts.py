"""Vega-Lite specs for a report: each experiment's charts with every run on them, coloured by run.

The same axes and series as the pages' charts (`core/charts/`), as plain Vega-Lite JSON: a report
is built by the CLI too, which has no Altair theme or Streamlit, and the JSON is all the inlined
Vega-Lite needs.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from core.experiments import batch, input_length, output_length, prefix_cache
from core.export import Record
from core.words import Words

PREFILL, DECODE, CACHE_HIT = "#2563eb", "#ea580c", "#16a34a"  # the app's phase colours (core/charts/palette.py)
RUN_COLOURS = ["#2563eb", "#ea580c", "#16a34a", "#9333ea", "#0891b2", "#be185d", "#a16207", "#4b5563"]
Spec = dict[str, Any]
ReportRun = tuple[str, Sequence[Record]]  # a run's label and its records


def _points(runs: Sequence[ReportRun], x: str, series: dict[str, str],
            extra: Sequence[str] = ()) -> list[dict[str, Any]]:
    """One value per record and series, for a long-format chart; failed records left out."""
    values = []
    for label, records in runs:
        for record in records:
            data = record.to_dict()
            if record.error or data.get(x) is None:
                continue
            for field, name in series.items():
                if data.get(field) is not None:
                    values.append({"run": label, "x": data[x], "y": data[field], "series": name,
                                   **{k: data.get(k) for k in extra}})
    return values


def _chart(title: str, values: list[dict[str, Any]], x: str, y: str, dash: str | None = None,
           log_y: bool = False) -> Spec | None:
    if not values:
        return None
    labels = list(dict.fromkeys(v["run"] for v in values))
    encoding: Spec = {
        "x": {"field": "x", "type": "quantitative", "title": x},
        "y": {"field": "y", "type": "quantitative", "title": y, **({"scale": {"type": "symlog"}} if log_y else {})},
        "color": {"field": "run", "type": "nominal", "title": None, "legend": {"orient": "bottom", "labelLimit": 400},
                  "scale": {"domain": labels, "range": RUN_COLOURS[: max(len(labels), 1)]}},
        "tooltip": [{"field": "run"}, {"field": "series"}, {"field": "x", "title": x},
                    {"field": "y", "title": y, "format": ",.1f"}],
    }
    if dash:
        encoding["strokeDash"] = {"field": dash, "type": "nominal", "title": None, "legend": {"orient": "bottom"}}
        encoding["shape"] = {"field": dash, "type": "nominal", "title": None, "legend": None}
    detail = ["run", dash] if dash else ["run"]
    encoding["detail"] = [{"field": name} for name in detail]
    return {
        "$schema": "https://vega.github.io/schema/vega-lite/v6.json",
        "title": title, "width": "container", "height": 280, "data": {"values": values},
        "mark": {"type": "line", "point": True, "tooltip": True}, "encoding": encoding,
    }


def experiment_charts(experiment: str, runs: Sequence[ReportRun], t: Words) -> list[Spec]:
    """The charts of one experiment, every run on each."""
    charts: list[Spec | None] = []
    if experiment == input_length.ID:
        series = {"ttft_ms": t("input.series_ttft"), "prefill_ms": t("input.series_prefill")}
        charts.append(_chart(t("input.chart_title"), _points(runs, "prompt_tokens", series), t("input.x"),
                             t("input.y"), dash="series"))
    elif experiment == output_length.ID:
        charts.append(_chart(t("output.chart_title"), _points(runs, "output_tokens", {"total_ms": "total"}),
                             t("output.x"), t("output.y")))
        charts.append(_chart(t("output.chart_per_token"), _points(runs, "output_tokens",
                                                                   {"ms_per_output_token": "per token"}),
                             t("output.x"), t("output.y")))
    elif experiment == prefix_cache.ID:
        for rows_key, title, y in (("recomputed_tokens", t("report.chart_recomputed"), t("cache.y_tokens")),
                                   ("ttft_ms", t("cache.chart_ttft"), t("cache.y_ms"))):
            values = _points(runs, "round", {rows_key: rows_key}, extra=("strategy",))
            for value in values:
                value["strategy"] = _strategy(t, value["strategy"])
            charts.append(_chart(title, values, t("cache.x"), y, dash="strategy", log_y=rows_key != "ttft_ms"))
    elif experiment == batch.ID:
        series = {"aggregate_decode_tps": t("batch.series_decode"), "per_stream_decode_tps": t("batch.series_stream"),
                  "aggregate_prefill_tps": t("batch.series_prefill")}
        charts.append(_chart(t("batch.chart_throughput"), _points(runs, "concurrency", series), t("batch.x"),
                             t("batch.y_tps"), dash="series"))
    return [chart for chart in charts if chart is not None]


def _strategy(t: Words, name: Any) -> str:
    try:
        return t(f"strategy.{name}")
    except KeyError:
        return str(name)
