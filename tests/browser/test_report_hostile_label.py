"""An imported run labelled ``<!--<script>`` blanked every chart of the HTML report: inside the script element
that holds the specs, that text put the HTML parser in a state where ``</script>`` no longer ended it. Opened
in headless Chromium, offline: every chart is drawn and the label shows as written."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from playwright.sync_api import Browser

from core.experiments.samples import EMBEDDED_DEFAULT
from core.report import ContentWords, build_report
from core.store import RunStore, export_run, import_export
from tests.support.browser import EVENT_MS

LABEL = "laptop <!--<script> </script><b>x</b> & \u2028 run"


@pytest.mark.browser
def test_a_script_breaking_label_leaves_every_chart_drawn(browser: Browser, tmp_path: Path) -> None:
    store = RunStore.memory()
    first, *_ = import_export(store, EMBEDDED_DEFAULT.read_text(), EMBEDDED_DEFAULT.name)
    saved = store.get(first)
    assert saved is not None
    hostile = json.loads(export_run(saved, store.records(first)))
    hostile["run"]["label"] = LABEL
    (run_id,) = import_export(store, json.dumps(hostile), "hostile.json")
    saved = store.get(run_id)
    assert saved is not None and saved.label == LABEL
    report = tmp_path / "report.html"
    report.write_text(build_report([(saved, store.records(run_id))], ContentWords("en")), encoding="utf-8")
    context = browser.new_context(offline=True)
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.goto(report.as_uri())
    page.wait_for_function("document.querySelectorAll('.chart').length > 0 && [...document.querySelectorAll("
                           "'.chart')].every(c => c.querySelector('svg .role-mark'))", timeout=EVENT_MS)
    charts = page.evaluate("[...document.querySelectorAll('.chart')].map(c => c.querySelectorAll("
                           "'g.role-mark path').length)")
    headings = page.evaluate("[...document.querySelectorAll('h3')].map(h => h.textContent)")
    context.close()
    assert errors == [] and charts and all(n > 0 for n in charts), (errors, charts)
    assert LABEL.replace("\u2028", " ") in [h.replace("\u2028", " ") for h in headings]  # shown as written
