"""The Saved runs page and the saved-runs list of an experiment page (AppTest, the real app): import,
refusal by line, rename, delete, a run saved as it runs, and hosted visitors kept apart."""

from __future__ import annotations

from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from core.experiments.samples import EMBEDDED_DEFAULT
from core.store import REFERENCE_ID, RunStore
from tests.support.apptest import KEY, api_state, app
from tests.support.fake_openai import FakeOpenAIServer


def runs_page(db: Path, **secrets: str) -> AppTest:
    at = app()
    at.secrets["PREFILL_LAB_DB"] = str(db)
    for name, value in secrets.items():
        at.secrets[name] = value
    at.switch_page("app_pages/runs.py").run()
    return at


def listed(at: AppTest) -> list[str]:
    return list(at.dataframe[0].value["run"])


@pytest.mark.slow
def test_import_rename_delete(tmp_path: Path) -> None:
    db = tmp_path / "runs.sqlite"
    at = runs_page(db)
    assert listed(at) == ["Chapter (published) · Mac Studio M3 Ultra · Qwen3.5-2B Q4_K_M"]
    at.file_uploader(key="runs_import").upload("friend.json", EMBEDDED_DEFAULT.read_bytes(), "application/json").run()
    assert any("Imported 3 runs from friend.json" in s.value for s in at.success)
    assert len(listed(at)) == 4 and not at.exception

    at.file_uploader(key="runs_import").upload("notes.json", b'{"rounds": [\n  {"round": 1}\n]}', "text/json").run()
    assert any("notes.json, line 2 (round 1): unknown experiment None" in e.value for e in at.error)
    assert len(listed(at)) == 4

    store = RunStore.open(str(db))
    target = next(r for r in store.runs() if r.id != REFERENCE_ID)
    at.multiselect(key="runs_chosen").set_value([target.id]).run()
    at.text_input[0].input("my friend's laptop").run()
    at.button[0].click().run()  # Rename
    assert "my friend's laptop" in listed(at)
    at.multiselect(key="runs_chosen").set_value([target.id]).run()
    next(b for b in at.button if b.label == "Delete").click().run()
    assert "my friend's laptop" not in listed(at) and RunStore.open(str(db)).get(target.id) is None
    assert not at.exception


@pytest.mark.slow
def test_a_run_is_saved_and_listed_on_its_page(tmp_path: Path) -> None:
    db = tmp_path / "runs.sqlite"
    with FakeOpenAIServer() as fake:
        at = app(**api_state(fake))
        at.secrets["PREFILL_LAB_DB"] = str(db)
        at.switch_page("app_pages/output.py").run()
        at.multiselect(key="output_lengths").set_value([8, 16]).run()
        at.button(key="run_output").click().run()
    (saved,) = [r for r in RunStore.open(str(db)).runs("output")]
    assert saved.rounds == 2 and saved.status == "done"
    assert KEY.encode() not in b"".join(p.read_bytes() for p in tmp_path.iterdir())
    fresh = app()  # another session (a reload): the saved run is drawn and listed again
    fresh.secrets["PREFILL_LAB_DB"] = str(db)
    fresh.switch_page("app_pages/output.py").run()
    assert len(fresh.dataframe[0].value) == 2 and list(fresh.dataframe[1].value["rounds"]) == [2]


@pytest.mark.slow
def test_hosted_visitors_see_only_their_own_runs(tmp_path: Path) -> None:
    db = tmp_path / "runs.sqlite"
    hosted = {"PREFILL_LAB_HOSTED": "true"}
    first = runs_page(db, **hosted)
    visitor = first.query_params["visitor"]
    first.file_uploader(key="runs_import").upload("mine.json", EMBEDDED_DEFAULT.read_bytes(), "application/json").run()
    assert len(listed(first)) == 4

    again = app()  # the same visitor's link in a new session: their runs are there
    again.secrets["PREFILL_LAB_DB"] = str(db)
    again.secrets["PREFILL_LAB_HOSTED"] = "true"
    again.query_params["visitor"] = visitor
    again.switch_page("app_pages/runs.py").run()
    assert len(listed(again)) == 4

    stranger = runs_page(db, **hosted)
    assert stranger.query_params["visitor"] != visitor
    assert listed(stranger) == ["Chapter (published) · Mac Studio M3 Ultra · Qwen3.5-2B Q4_K_M"]
    assert {r.owner for r in RunStore.open(str(db)).runs() if r.id != REFERENCE_ID} == {visitor}
