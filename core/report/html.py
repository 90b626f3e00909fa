"""One self-contained HTML file for one run or a comparison: charts, conclusions, tables, settings, sources.

Every registered experiment is reported the same way: its charts are the pages' own (`core.charts.CHARTS`,
embedded as Vega-Lite) and its conclusion is the pages' (`core.conclusions.conclusion_of`, rendered from the same
words).

It opens anywhere with the network off: Vega, Vega-Lite and Vega-Embed are inlined from
``core/report/vendor/`` (versions in `VENDORED`, licences beside them), never loaded from a CDN.
Charts are drawn as SVG.
"""

from __future__ import annotations

import html
import json
from collections.abc import Iterator, Mapping, Sequence
from datetime import datetime
from functools import cache
from pathlib import Path
from typing import Any

import altair as alt

from core.charts import CHARTS, RunView
from core.conclusions import MachineState, conclusion_of, paragraph
from core.experiments import EXPERIMENTS
from core.export import Record
from core.roofline.report import si
from core.secrets import scrubbed
from core.store.dates import run_date
from core.store.db import SavedRun
from core.store.machine import machine_name
from core.words import Words

VENDOR = Path(__file__).resolve().parent / "vendor"
VENDORED = {"vega": "6.4.0", "vega-lite": "6.5.0", "vega-embed": "7.3.0"}  # npm packages, BSD-3-Clause
EXPLAINED = ("prefill_ms", "ttft_ms", "decode_ms", "ms_per_output_token", "cached_tokens", "prefill_source",
             "decode_source", "usage_source")
ReportEntry = tuple[SavedRun, Sequence[Record]]

STYLE = """
body{font:15px/1.5 system-ui,-apple-system,"Segoe UI",sans-serif;max-width:1100px;margin:2em auto;padding:0 1em;
color:#1f2937}
h1{margin-bottom:0}.note{color:#6b7280;font-size:13px}table{border-collapse:collapse;margin:.5em 0 1.5em;font-size:13px}
td,th{border:1px solid #e5e7eb;padding:3px 8px;text-align:right;white-space:nowrap}th{background:#f9fafb}
td.l,th.l{text-align:left}.chart{width:100%;margin:1em 0}.scroll{overflow-x:auto}.shown{color:#15803d}
.not{color:#6b7280}dt{font-weight:600;margin-top:.4em}
"""


@cache
def _vendored_js() -> str:
    return "\n".join(f"<script>/* {name} {version}, BSD-3-Clause (core/report/vendor) */\n"
                     f"{(VENDOR / f'{name}.min.js').read_text(encoding='utf-8')}\n</script>"
                     for name, version in VENDORED.items())


def _e(value: Any) -> str:
    """Text for the page, escaped, with any key it carries masked (a URL's password, a provider's echo)."""
    return html.escape(scrubbed("" if value is None else str(value)))


SCRIPT_SAFE = str.maketrans({"<": "\\u003c", ">": "\\u003e", "&": "\\u0026", "\u2028": "\\u2028",
                             "\u2029": "\\u2029"})


def _script_json(value: Any) -> str:
    """JSON safe inside a <script> element: no ``<`` at all, so neither ``</script>`` nor ``<!--<script>`` (which
    puts the HTML parser in a state where ``</script>`` no longer ends the element: every chart blanked) can
    occur; the same strings once parsed."""
    return scrubbed(json.dumps(value, ensure_ascii=False)).translate(SCRIPT_SAFE)


def _embedded(chart: alt.TopLevelMixin) -> dict[str, Any]:
    """A chart's Vega-Lite spec as the report embeds it: as wide as the page."""
    spec: dict[str, Any] = chart.to_dict()
    if not any(key in spec for key in ("hconcat", "vconcat", "concat", "facet")):
        spec["width"] = "container"
    return spec


def _records_table(records: Sequence[Record]) -> str:
    dicts = [r.to_dict() for r in records]
    columns = [k for k in (dicts[0] if dicts else {}) if not isinstance(dicts[0][k], list | dict)
               and any(d.get(k) not in (None, "", False) for d in dicts)]
    head = "".join(f"<th>{_e(c)}</th>" for c in columns)
    body = "".join("<tr>" + "".join(f"<td>{_e(d.get(c))}</td>" for c in columns) + "</tr>" for d in dicts)
    return f"<div class='scroll'><table><tr>{head}</tr>{body}</table></div>"


UNITS = {"roof.memory.value": "B/s", "roof.compute.value": "FLOP/s"}  # a figure's unit where its key says it


def _flat(data: Mapping[str, Any], prefix: str = "") -> Iterator[tuple[str, Any]]:
    """Nested tables as dotted keys (``roof.memory.value``), so no cell holds a JSON blob."""
    for key, value in data.items():
        if isinstance(value, Mapping):
            yield from _flat(value, f"{prefix}{key}.")
        else:
            yield f"{prefix}{key}", value


def _shown(key: str, value: Any) -> str:
    """A value as a reader reads it: large figures with an SI prefix and their unit (``8.09 GB/s``, never
    8092695617.426293), other floats to 3 significant digits, lists joined."""
    if isinstance(value, float):
        return si(value, UNITS.get(key, "")).strip() if abs(value) >= 1e4 else f"{value:.3g}"
    if isinstance(value, list | tuple):
        return ", ".join(_shown(key, v) for v in value)
    return "" if value is None else str(value)


def _pairs(data: Mapping[str, Any]) -> str:
    rows = "".join(f"<tr><th class='l'>{_e(k)}</th><td class='l'>{_e(_shown(k, v))}</td></tr>" for k, v in _flat(data))
    return f"<table>{rows}</table>"


def _busy(t: Words, saved: SavedRun) -> str:
    """The run's busy note, as the page says it: the meter's figures kept with the run."""
    state = saved.state
    if not (state.busy and state.server_share is not None and state.others_s is not None):
        return ""
    load = "-" if state.load is None else f"{state.load:.1f}"
    note = t("report.machine_busy", share=100 * state.server_share, others=state.others_s, load=load)
    return f"<p class='not'>{_e(note)}</p>"


def _concluded(saved: SavedRun, records: Sequence[Record], t: Words) -> str:
    """One run's conclusion (the one kept with it, else computed from its records and state), as the pages say it."""
    state, stored = saved.machine.get("state"), saved.summary.get("conclusion")
    found = conclusion_of(EXPERIMENTS[saved.experiment], records,
                          MachineState.from_dict(state) if isinstance(state, Mapping) else None,
                          stored if isinstance(stored, Mapping) else None)
    return (f"<li class='{'shown' if found.shown else 'not'}'><b>{_e(saved.label)}</b>: "
            f"{_e(paragraph(found, t))}</li>")


def status_word(t: Words, status: str) -> str:
    return t(f"runs.status_{status}")


def build_report(entries: Sequence[ReportEntry], t: Words, lang: str = "en", generated: datetime | None = None) -> str:
    """The whole report as one HTML document."""
    generated = generated or datetime.now()
    specs: dict[str, Any] = {}
    versions = {name.replace("-", "_"): version for name, version in VENDORED.items()}
    note = t("report.generated", time=generated.strftime("%Y-%m-%d %H:%M"), **versions)
    parts = [f"<h1>{_e(t('report.title'))}</h1>", f"<p class='note'>{_e(note)}</p>",
             f"<h2>{_e(t('report.runs'))}</h2>"]
    columns = ("label", "experiment", "machine", "backend", "model", "date", "rounds", "status", "source")
    head = "".join(f"<th class='l'>{_e(t(f'report.col_{c}'))}</th>" for c in columns)
    rows = "".join(
        f"<tr><td class='l'>{_e(s.label)}</td><td class='l'>{_e(t(f'{s.experiment}.title'))}</td>"
        f"<td class='l'>{_e(machine_name(s.machine))}</td><td class='l'>{_e(s.backend)}</td>"
        f"<td class='l'>{_e(s.model)}</td><td class='l'>{_e(run_date(s.started_at))}</td><td>{len(records)}</td>"
        f"<td class='l'>{_e(status_word(t, s.status))}</td><td class='l'>{_e(t(f'runs.source_{s.source}'))}</td></tr>"
        for s, records in entries)
    parts.append(f"<table><tr>{head}</tr>{rows}</table>")
    for experiment in [e for e in EXPERIMENTS if any(s.experiment == e for s, _ in entries)]:
        group = [(s, records) for s, records in entries if s.experiment == experiment]
        parts.append(f"<h2>{_e(t(f'{experiment}.title'))}</h2>")
        for chart in CHARTS[experiment]([RunView(s.label, records) for s, records in group], t):
            chart_id = f"chart-{len(specs) + 1}"
            specs[chart_id] = _embedded(chart)
            parts.append(f"<div class='chart' id='{chart_id}'></div>")
        parts.append(f"<h3>{_e(t('report.verdict'))}</h3><ul>")
        parts += [_concluded(saved, records, t) for saved, records in group]
        parts.append("</ul>")
        for saved, records in group:
            parts.append(f"<h3>{_e(saved.label)}</h3>")
            parts.append(f"<h4>{_e(t('report.records'))}</h4>{_records_table(records)}")
            parts.append(f"<h4>{_e(t('report.machine'))}</h4>{_busy(t, saved)}{_pairs(saved.machine)}")
            parts.append(f"<h4>{_e(t('report.settings'))}</h4>{_pairs(saved.settings)}")
    parts.append(f"<h2>{_e(t('report.sources'))}</h2><p>{_e(t('report.sources_intro'))}</p><dl>")
    parts += [f"<dt>{_e(c)}</dt><dd>{_e(t(f'table.{c}'))}</dd>" for c in EXPLAINED]
    parts.append("</dl>")
    draw = ("<script>const SPECS=" + _script_json(specs) + ";for(const [id,spec] of Object.entries(SPECS)){"
            "vegaEmbed('#'+id,spec,{renderer:'svg',actions:false}).catch(e=>{"
            "document.getElementById(id).textContent='Chart not drawn: '+e;});}</script>")
    return (f"<!DOCTYPE html><html lang='{_e(lang)}'><head><meta charset='utf-8'>"
            f"<meta name='viewport' content='width=device-width,initial-scale=1'><title>{_e(t('report.title'))}</title>"
            f"<style>{STYLE}</style>{_vendored_js()}</head><body>{''.join(parts)}{draw}</body></html>")
