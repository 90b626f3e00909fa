"""What every experiment page shares: Run and Stop, the live loop, saved runs, the table and downloads.

A page describes its run (`ExperimentPlan`, and `Records` when its records are not rounds), may show what will
be sent (`preview`), then calls `run_controls` and `show_run` with its ``draw``; `explain` sets what to expect
beside what the run showed. The explainer quotes what this session measured (`measured`, `newest`, `rows_of`)
and the home page's quick run starts runs itself (`start_run`, `session_runs`, `busy_note`); the saved runs' page
lists, imports, reports and renames them (`run_store`, `saved_runs`, `runs_table`, ...); the cache doctor bounds
its uploads.
"""

from ui.runs.contract import ExperimentPlan, Records
from ui.runs.controls import preview, run_controls, session_runs, start_run, uploaded
from ui.runs.history import compaction_measured, measured, newest, rows_of
from ui.runs.loop import busy_note, explain, show_run
from ui.runs.saved import (
    choice_label,
    hosted_visitor,
    import_upload,
    latest_saved,
    report_maker,
    run_store,
    runs_table,
    saved_runs,
    store_notice,
)
from ui.runs.visitor import bounded_uploads, free_uploads_when_gone

__all__ = ["ExperimentPlan", "Records", "bounded_uploads", "busy_note", "choice_label", "compaction_measured",
           "explain",
           "free_uploads_when_gone", "hosted_visitor", "import_upload", "latest_saved", "measured", "newest",
           "preview", "report_maker", "rows_of", "run_controls", "run_store", "runs_table", "saved_runs",
           "session_runs", "show_run", "start_run", "store_notice", "uploaded"]
