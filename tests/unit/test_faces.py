"""The packages' faces: what each package's ``__init__`` exports is pinned here, and every name exists, so a change
to what callers may import from a package is a change to this file too (httpx's test_exported_members)."""

from __future__ import annotations

import importlib

import pytest

FACES = {
    "core.experiments": ["EXPERIMENTS", "Experiment", "Option", "Plan", "RunContext", "declared_options",
                         "records_key"],
    "core.charts": ["CHARTS", "ChartsOf", "RunView"],
    "core.runs": ["DONE", "FAILED", "QUEUED", "RUNNING", "STOPPED", "WAITING", "BackgroundRun", "Events",
                  "NotStarted", "RunContext", "RunOrder", "Snapshot", "Source", "Visit", "start_run"],
    "core.report": ["VENDORED", "ContentWords", "Words", "build_report"],
    "ui.runs": ["ExperimentPlan", "Records", "bounded_uploads", "busy_note", "choice_label",
                "compaction_measured", "explain",
                "free_uploads_when_gone", "hosted_visitor", "import_upload", "latest_saved", "measured", "newest",
                "preview", "report_maker", "rows_of", "run_controls", "run_store", "runs_table", "saved_runs",
                "session_runs", "show_run", "start_run", "store_notice", "uploaded"],
    "ui.sidebar": ["connect", "current_target", "key_source", "render_sidebar", "start_embedded"],
}


@pytest.mark.parametrize("package", list(FACES))
def test_a_package_exports_exactly_its_face(package: str) -> None:
    module = importlib.import_module(package)
    assert sorted(module.__all__) == sorted(FACES[package])
    assert all(hasattr(module, name) for name in module.__all__)
