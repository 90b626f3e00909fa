"""A run's machine state and conclusion travel with it: the store (SQLite and PostgreSQL), ``runs show``, an export
and its import, and the HTML report's machine section. And the store's process checks without /proc."""

from __future__ import annotations

import html
import os
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from core.cli.main import main
from core.conclusions import DISTURBED, MachineState, render
from core.experiments import EXPERIMENTS
from core.experiments.output_length import ID as OUTPUT
from core.experiments.samples import EMBEDDED_DEFAULT
from core.report import ContentWords, build_report
from core.runs.runner import DONE, RUNNING
from core.store import CUT, RunStore, export_run, import_export, open_store, read_export
from core.store.db import _process_start

BUSY = MachineState(measured=True, server_share=0.25, others_s=3.0, load=1.5, cores=2, busy=True)


def output_rounds() -> list:
    """A real run's rounds of experiment 2 (the recorded sample), so the report draws its charts."""
    runs = read_export(EMBEDDED_DEFAULT.read_text(), "sample")
    return next(item.records for item in runs if item.experiment == OUTPUT)


CONCLUSION = EXPERIMENTS[OUTPUT].conclude(output_rounds(), BUSY)  # what the run concluded as it ended


def saved_run(location: str) -> str:
    store = open_store(location)
    run_id = store.begin(OUTPUT, {"backend": "api", "model": "m"}, label="a busy run",
                         machine={"cpu": "Test CPU", "cores": 2})
    for record in output_rounds():
        store.add(run_id, record)
    store.finish(run_id, DONE, {"conclusion": CONCLUSION.to_dict()}, state=BUSY.to_dict())
    store.close()
    return run_id


@pytest.mark.slow
def test_the_state_and_the_conclusion_survive_the_store_an_export_and_an_import(location: str) -> None:
    run_id = saved_run(location)
    saved = RunStore.open(location).get(run_id)
    assert saved is not None and saved.machine == {"cpu": "Test CPU", "cores": 2, "state": BUSY.to_dict()}
    assert saved.summary == {"conclusion": CONCLUSION.to_dict()}
    assert saved.state == BUSY and saved.conclusion == CONCLUSION
    other = RunStore.memory()
    (imported_id,) = import_export(other, export_run(saved, RunStore.open(location).records(run_id)), "busy.json")
    imported = other.get(imported_id)
    assert imported is not None and imported.state == BUSY and imported.conclusion == CONCLUSION


def test_runs_show_prints_the_state_the_busy_note_and_the_conclusion(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    db = str(tmp_path / "runs.sqlite")
    run_id = saved_run(db)
    monkeypatch.setenv("PREFILL_LAB_DB", db)
    assert main(["runs", "show", run_id]) == 0
    out = capsys.readouterr().out
    words = ContentWords()
    assert '"server_share": 0.25, "others_s": 3.0, "load": 1.5, "cores": 2, "busy": true' in out
    assert words("roofline.busy", share=25.0, others=3.0) in out
    assert words("roofline.busy_load", load=1.5, cores=2) in out
    assert CONCLUSION.status == DISTURBED and "\n  conclusion:" in out
    assert all(f"    {line}" in out for line in render(CONCLUSION, words))


def test_the_reports_machine_section_says_the_machine_was_busy(tmp_path: Path) -> None:
    db = str(tmp_path / "runs.sqlite")
    store = RunStore.open(db)
    saved = store.get(saved_run(db))
    assert saved is not None
    words = ContentWords()
    page = build_report([(saved, store.records(saved.id))], words)
    assert html.escape(words("report.machine_busy", share=25.0, others=3.0, load="1.5")) in page
    quiet = RunStore.memory()
    run_id = quiet.begin(OUTPUT, {"backend": "api"}, label="quiet", machine={"cpu": "Test CPU"})
    quiet.add_all(run_id, output_rounds())
    quiet.finish(run_id, DONE, state=MachineState(True, 0.95, 0.1, 0.2, 2, False).to_dict())
    calm = quiet.get(run_id)
    assert calm is not None and calm.state.measured
    heading = words("report.machine_busy", share=95.0, others=0.1, load="0.2").split(":")[0]
    assert heading in page and heading not in build_report([(calm, quiet.records(run_id))], words)  # only when busy


@pytest.fixture
def no_proc(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(psutil, "PROCFS_PATH", str(tmp_path / "no-proc"))


def test_without_proc_the_store_opens_writes_and_reads_runs(no_proc: None, tmp_path: Path) -> None:
    """psutil reads no /proc: a writer's start is not known (""); a writer that has ended is still told by the
    kernel (its run is cut), one that lives is taken as alive (running, never guessed cut); nothing raises."""
    assert _process_start(os.getpid()) == ""
    location = str(tmp_path / "runs.sqlite")
    store = RunStore.open(location)
    gone, alive = store.begin(OUTPUT, {}, label="gone"), store.begin(OUTPUT, {}, label="alive")
    ended = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True,
                           check=True)
    with subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"]) as living:
        try:
            store.db.execute("UPDATE runs SET writer_pid = ? WHERE id = ?", (int(ended.stdout), gone))
            store.db.execute("UPDATE runs SET writer_pid = ? WHERE id = ?", (living.pid, alive))
            statuses = {run.label: run.status for run in RunStore.open(location).runs(OUTPUT)}
        finally:
            living.kill()
    assert statuses == {"gone": CUT, "alive": RUNNING}
    store.finish(alive, DONE, state=MachineState().to_dict())
    saved = store.get(alive)
    assert saved is not None and saved.status == DONE and saved.state == MachineState()
