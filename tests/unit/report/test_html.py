"""The HTML report of a run of every registered experiment shows its charts and its verdict: the report iterates
the registries (`EXPERIMENTS`, `CHARTS`) and tests no id, so an experiment added to them is reported too."""

from __future__ import annotations

import html
import json
import re

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
