"""The machine's state travels with the run: after a reload (the page's history rebuilt from the store) the busy
note is still said beside the run, and the home page's quick run says it too (AppTest, the real app)."""

from __future__ import annotations

from pathlib import Path

import pytest

from core.conclusions import MachineState
from core.experiments.input_length import ID as INPUT
from core.experiments.output_length import ID as OUTPUT
from core.experiments.samples import EMBEDDED_DEFAULT
from core.runs.runner import DONE
from core.store import RunStore, read_export
from core.words import ContentWords
from tests.support.apptest import app

BUSY = MachineState(measured=True, server_share=0.31, others_s=4.2, load=2.6, cores=2, busy=True)
QUIET = MachineState(measured=True, server_share=0.93, others_s=0.2, load=0.4, cores=2, busy=False)


def saved(db: Path, experiment: str, state: MachineState) -> None:
    """A finished run of ``experiment`` (the recorded sample's rounds) measured on a machine in ``state``."""
    store = RunStore.open(str(db))
    records = next(item.records for item in read_export(EMBEDDED_DEFAULT.read_text(), "sample")
                   if item.experiment == experiment)
    run_id = store.begin(experiment, {"backend": "local", "model": "m"}, label=f"{experiment} earlier")
    store.add_all(run_id, records)
    store.finish(run_id, DONE, state=state.to_dict())
    store.close()


def busy_sentence(state: MachineState) -> str:
    return ContentWords()("roofline.busy", share=100 * (state.server_share or 0), others=state.others_s)


def warnings_of(db: Path, page: str) -> list[str]:
    at = app()
    at.secrets["PREFILL_LAB_DB"] = str(db)
    at.run()
    if page:
        at.switch_page(page).run()
    assert not at.exception, at.exception
    return [w.value for w in at.warning]


@pytest.mark.slow
def test_after_a_reload_the_saved_runs_busy_note_is_still_shown(tmp_path: Path) -> None:
    db = tmp_path / "runs.sqlite"
    saved(db, OUTPUT, BUSY)
    shown = warnings_of(db, "app_pages/output.py")  # a fresh session: no history, the newest saved run
    load = ContentWords()("roofline.busy_load", load=2.6, cores=2)
    assert f"{busy_sentence(BUSY)} {load}" in shown


@pytest.mark.slow
def test_a_quiet_run_has_no_busy_note(tmp_path: Path) -> None:
    db = tmp_path / "runs.sqlite"
    saved(db, OUTPUT, QUIET)
    assert not any(w.startswith("The machine was busy") for w in warnings_of(db, "app_pages/output.py"))


@pytest.mark.slow
def test_the_home_pages_quick_run_says_when_the_machine_was_busy(tmp_path: Path) -> None:
    db = tmp_path / "runs.sqlite"
    saved(db, INPUT, BUSY)
    saved(db, OUTPUT, QUIET)
    shown = warnings_of(db, "")  # the home page, whose numbers are quoted from these runs
    title = ContentWords()(f"{INPUT}.title")  # several notes can stand together: each names its run
    assert sum(w.startswith(f"**{title}** · {busy_sentence(BUSY)}") for w in shown) == 1
