"""The HTML report of a run of every registered experiment shows its charts and its verdict: the report iterates
the registries (`EXPERIMENTS`, `CHARTS`) and tests no id, so an experiment added to them is reported too."""

from __future__ import annotations

import html
import json
import re
from dataclasses import replace

import pytest

from core.charts import CHARTS, RunView
from core.conclusions import paragraph
from core.experiments import EXPERIMENTS
from core.report import ContentWords, build_report
from core.store.db import SavedRun


def saved(experiment: str, settings: dict[str, object], rounds: int) -> SavedRun:
    return SavedRun(id=f"{experiment}-1", experiment=experiment, label=f"recorded {experiment}", backend="llama",
                    model="SmolLM2", settings=settings, machine={}, summary={}, source="imported", owner="",
                    status="done", started_at=0.0, finished_at=None, rounds=rounds)


@pytest.mark.parametrize("experiment", list(EXPERIMENTS))
def test_a_report_of_each_experiment_has_its_charts_and_its_verdict(experiment: str) -> None:
    spec = EXPERIMENTS[experiment]
    settings, records = spec.recorded()
    assert records, f"{experiment} ships a recorded sample to report on"
    words = ContentWords("en")
    text = build_report([(saved(experiment, settings, len(records)), records)], words)

    specs = json.loads(re.search(r"const SPECS=(\{.*?\});for", text, re.DOTALL).group(1).replace("<\\/", "</"))
    charts = CHARTS[experiment]([RunView(f"recorded {experiment}", records)], words)
    assert charts and len(specs) == len(charts)  # the pages' own charts, each embedded as Vega-Lite
    assert all(spec_["$schema"].startswith("https://vega.github.io/schema/vega-lite/v6") for spec_ in specs.values())
    sentence = paragraph(spec.conclude(records, None), words)
    assert sentence and f"<b>recorded {experiment}</b>: {html.escape(sentence)}" in text


def test_the_report_draws_experiment_5s_measured_phases_and_reads_its_machine_as_a_reader_would() -> None:
    """The roofline as the page draws it (the roofs and the measured prefill and decode under them), and a machine
    table without a JSON blob or a float such as 8092695617.426293."""
    spec = EXPERIMENTS["roofline"]
    settings, records = spec.recorded()
    machine = {"cpu": "AMD EPYC", "cores": 2, "roof": {"machine": "AMD EPYC", "memory": {"value": 8092695617.426293,
               "how": "numpy float64 sum"}, "compute": {"value": 73e9, "how": "matmul"}, "as_of": "2026-12-01"}}
    run = replace(saved("roofline", settings, len(records)), machine=machine)
    text = build_report([(run, records)], ContentWords("en"))
    specs = json.loads(re.search(r"const SPECS=(\{.*?\});for", text, re.DOTALL).group(1))
    points = {(row["phase"], row["tps"]) for chart in specs.values() for rows in chart.get("datasets", {}).values()
              for row in rows if "phase" in row}
    measured = {(r.kind, r.value) for r in records if r.kind in ("prefill", "decode")}
    assert points == measured and len(points) == 2
    assert "8092695617" not in text and "8.09 GB/s" in text and "73 GFLOP/s" in text
    tables = text.rsplit("</head><body>", 1)[1].split("<script>const SPECS=")[0]
    assert "{&quot;" not in tables and "roof.memory.value" in tables
