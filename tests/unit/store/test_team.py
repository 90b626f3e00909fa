"""A team's store (issue 25): engineers on one PostgreSQL see each other's runs, labelled by machine and author, drawn
on one chart; each renames and deletes only their own, in the store, the CLI and on the Saved runs page."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from core.experiments.prefix_cache import ID as CACHE
from core.records import RoundResult
from core.runs.runner import DONE
from core.store import RunStore, open_store
from tests.support import ROOT
from tests.support.apptest import app


def as_author(url: str, author: str, monkeypatch: pytest.MonkeyPatch) -> RunStore:
    monkeypatch.setenv("PREFILL_LAB_AUTHOR", author)
    return open_store(url)


def measured(store: RunStore, label: str, machine: dict[str, object]) -> str:
    run_id = store.begin(CACHE, {"backend": "api"}, label=label, machine=machine)
    for i in (1, 2):
        store.add(run_id, RoundResult(CACHE, i, strategy="append_only", ttft_ms=10.0 * i))
    store.finish(run_id, DONE)
    return run_id


def test_everyone_sees_every_run_and_changes_only_their_own(postgres_url: str,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    alice, bob = as_author(postgres_url, "alice", monkeypatch), as_author(postgres_url, "bob", monkeypatch)
    hers = measured(alice, "laptop", {"cpu": "M3", "cores": 8})
    his = measured(bob, "gpu box", {"cpu": "EPYC", "cores": 64})
    for store in (alice, bob):
        seen = {r.id: (r.author, r.machine["cpu"]) for r in store.runs(CACHE)}
        assert seen[hers] == ("alice", "M3") and seen[his] == ("bob", "EPYC")
        assert len(store.records_of([hers, his])[his]) == 2  # drawable together
    assert not alice.rename(his, "mine now") and not alice.delete(his)
    assert bob.get(his).label == "gpu box"  # type: ignore[union-attr]
    assert alice.rename(hers, "alice's laptop") and bob.get(hers).label == "alice's laptop"  # type: ignore[union-attr]
    assert not bob.delete(hers) and alice.delete(hers) and bob.get(hers) is None
    reference = alice.get("chapter-mac-studio")
    assert reference is not None and reference.author == "" and not bob.delete(reference.id)


def test_the_author_defaults_to_the_login_name_on_a_team_store_and_to_nobody_in_a_file(
        postgres_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PREFILL_LAB_AUTHOR", raising=False)
    assert open_store(postgres_url).author and open_store(str(tmp_path / "runs.sqlite")).author == ""
    visitor_run = open_store(postgres_url).begin(CACHE, {}, label="a visitor's", owner="visitor-1")
    assert open_store(postgres_url).get(visitor_run).author == ""  # type: ignore[union-attr]


@pytest.mark.slow
def test_the_cli_refuses_another_authors_run_in_a_sentence(postgres_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    his = measured(as_author(postgres_url, "bob", monkeypatch), "gpu box", {"cpu": "EPYC", "cores": 64})
    env = {**os.environ, "PREFILL_LAB_DB": postgres_url, "PREFILL_LAB_AUTHOR": "alice"}
    listed = subprocess.run([sys.executable, "-m", "core", "runs", "list"], cwd=ROOT, capture_output=True, text=True,
                            env=env, timeout=60)
    assert "EPYC · 64 cores · bob" in listed.stdout
    for action in (["delete", his], ["rename", his, "mine"]):
        done = subprocess.run([sys.executable, "-m", "core", "runs", *action], cwd=ROOT, capture_output=True,
                              text=True, env=env, timeout=60)
        assert done.returncode == 2 and f"error: {his} is bob's run; on a team's store only its author" in done.stderr
    assert open_store(postgres_url).get(his).label == "gpu box"  # type: ignore[union-attr]


@pytest.mark.slow
def test_the_pages_label_runs_by_author_and_keep_others_runs_as_they_are(postgres_url: str,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    bob = as_author(postgres_url, "bob", monkeypatch)
    his = measured(bob, "gpu box", {"cpu": "EPYC", "cores": 64})
    measured(bob, "gpu box again", {"cpu": "EPYC", "cores": 64})  # the page shows the newest; the other is offered
    at = app()
    at.secrets["PREFILL_LAB_DB"] = postgres_url
    at.secrets["PREFILL_LAB_AUTHOR"] = "alice"  # the secrets win over the environment's (bob, above)
    at.switch_page("app_pages/runs.py").run()
    table = at.dataframe[0].value
    assert list(table["author"]) == ["bob", "bob", ""] and "EPYC · 64 cores" in list(table["machine"])
    assert any("A team's store" in c.value and "(alice)" in c.value for c in at.caption)
    assert "pw-" not in str(at.caption)  # the URL shown with its password masked
    at.multiselect(key="runs_chosen").set_value([his]).run()
    assert any("Only their authors rename or delete runs" in c.value for c in at.caption)
    assert next(b for b in at.button if b.label == "Delete").disabled and not at.text_input
    at.switch_page("app_pages/cache.py").run()
    offered = at.multiselect(key="compare_cache").options
    assert any("gpu box · EPYC · 64 cores · bob" in option for option in offered) and not at.exception, offered
