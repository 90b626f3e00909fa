"""HTML reports (core/report): one file with everything in it, drawn by headless Chromium with the network off."""

from __future__ import annotations

import json
import os
import re
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import sync_playwright

from core.experiments.samples import EMBEDDED_BATCH, EMBEDDED_DEFAULT
from core.report import ContentWords, build_report
from core.report.html import ReportEntry
from core.store import REFERENCE_ID, RunStore, import_export, open_store
from tests.support.browser import EVENT_MS

CHROMIUM = os.environ.get("CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"


@pytest.fixture
def store(tmp_path: Path) -> Iterator[RunStore]:
    store = open_store(str(tmp_path / "runs.sqlite"))
    import_export(store, EMBEDDED_DEFAULT.read_text(), EMBEDDED_DEFAULT.name)
    import_export(store, EMBEDDED_BATCH.read_text(), EMBEDDED_BATCH.name)
    yield store
    store.close()


def entries(store: RunStore) -> list[ReportEntry]:
    return [(saved, store.records(saved.id)) for saved in store.runs()]


def test_report_is_one_file_that_loads_nothing(store: RunStore) -> None:
    text = build_report(entries(store), ContentWords("en"))
    markup = re.sub(r"<script>.*?</script>", "", text, flags=re.DOTALL)  # the inlined code, data and charts
    assert not re.search(r"<link|<img|<iframe|@import|\b(src|href)\s*=", markup)
    assert text.count("<script>") == 4  # vega, vega-lite, vega-embed and the specs: nothing fetched
    assert "vegaEmbed" in text and "Experiment 4" in text and "Where every number comes from" in text
    assert "Mac Studio (M3 Ultra), published" in text  # the reference run's machine, beside ours


def test_report_in_chinese(store: RunStore) -> None:
    text = build_report(entries(store), ContentWords("zh"), "zh")
    assert "<html lang='zh'>" in text and "Prefill Lab 报告" in text and "每个数字从哪来" in text


@pytest.mark.browser
def test_report_draws_its_charts_offline_in_chromium(store: RunStore, tmp_path: Path) -> None:
    report = tmp_path / "report.html"
    text = build_report(entries(store), ContentWords("en"))
    report.write_text(text, encoding="utf-8")
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
        context = browser.new_context(offline=True)
        page = context.new_page()
        requests: list[str] = []
        errors: list[str] = []
        page.on("request", lambda request: requests.append(request.url))
        page.on("pageerror", lambda error: errors.append(str(error)))
        page.goto(report.as_uri())
        page.wait_for_function("document.querySelectorAll('.chart').length > 0 && [...document.querySelectorAll("
                               "'.chart')].every(c => c.querySelector('svg .role-mark'))", timeout=EVENT_MS)
        drawn = page.evaluate("""() => [...document.querySelectorAll('.chart')].map(chart => ({
            id: chart.id,
            marks: chart.querySelectorAll('.role-mark path, .role-mark line, .role-mark rect').length,
            legend: [...chart.querySelectorAll('.role-legend-label text')].map(t => t.textContent)}))""")
        browser.close()
    assert errors == [] and [url for url in requests if not url.startswith("file:")] == []
    assert len(drawn) == text.count("<div class='chart'") >= 6  # every experiment's charts (core.charts.CHARTS)
    for chart in drawn:
        assert chart["marks"] > 0, chart
    # experiment 3's runs, ours and the chapter's, on one chart
    assert any(any("Chapter" in label for label in c["legend"]) and any("local" in label for label in c["legend"])
               for c in drawn)
    assert json.loads(json.dumps(drawn))  # plain data came back from the page


def test_reference_run_compares_with_a_measured_run(store: RunStore) -> None:
    reference = store.get(REFERENCE_ID)
    assert reference is not None
    text = build_report([(reference, store.records(REFERENCE_ID))], ContentWords("en"))
    assert "append only recomputed a median of 18 tokens" in text  # the verdict read from the published figures
