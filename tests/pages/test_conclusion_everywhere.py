"""One run, one conclusion, the same words everywhere: experiment 1-5's page (AppTest), the HTML report and the CLI
say the same sentences of the same run, recorded or perturbed, and a conclusion stored with a run wins over one
computed again."""

from __future__ import annotations

import argparse
import html
import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from streamlit.testing.v1 import AppTest

from core.cli.main import _report, main
from core.conclusions import DISTURBED, Conclusion, Finding, MachineState, conclusion_of, paragraph
from core.experiments import EXPERIMENTS
from core.experiments.batch import BatchLevel
from core.export import from_json
from core.report import ContentWords, build_report
from core.runs.runner import BackgroundRun
from core.store.db import SavedRun
from tests.support.apptest import api_state, app

BUSY = MachineState(measured=True, server_share=0.42, others_s=9.5, load=2.5, cores=2, busy=True)
EVERY = tuple(EXPERIMENTS)  # each with its perturbation below
EN = ContentWords("en")


def perturbed(experiment: str) -> list[Any]:
    """The recorded run with one thing gone wrong: a round, a level or a phase the conclusion must name."""
    rows = EXPERIMENTS[experiment].recorded()[1]
    if experiment == "batch":  # the smallest level slowed: each of 2 streams beats one alone
        return [replace(rows[0], per_stream_decode_tps=4.5, aggregate_decode_tps=4.5), *rows[1:]]
    if experiment == "roofline":  # the request failed: roofs only
        return rows[:2]
    if experiment == "kv_cache":  # one cached step in four held up 10 times by another program
        return [replace(r, step_ms=r.step_ms * 10) if r.way == "cached" and r.step % 4 == 2 else r for r in rows]
    if experiment == "conversation":  # the window reused its prefix as well as append only did
        return [replace(r, recomputed_tokens=min(r.recomputed_tokens or 0, 60)) if r.strategy.startswith("window")
                else r for r in rows]
    if experiment == "arrivals":  # one rate only: nothing to compare it with
        return rows[:1]
    if experiment == "cache":  # append only recomputed everything: no cache reuse
        return [replace(r, recomputed_tokens=r.prompt_tokens) for r in rows]
    slow = max(r.round for r in rows if r.experiment == experiment) - 1  # one round slowed 8 times
    return [replace(r, prefill_ms=r.prefill_ms * 8, ttft_ms=r.ttft_ms * 8, total_ms=r.total_ms * 8,
                    ms_per_output_token=r.ms_per_output_token * 8) if r.round == slow else r for r in rows]


def saved(experiment: str, records: list[Any], state: MachineState | None, stored: Conclusion | None) -> SavedRun:
    return SavedRun(id=f"{experiment}-1", experiment=experiment, label="the run", backend="llama", model="SmolLM2",
                    settings={}, machine={"cpu": "test", **({"state": state.to_dict()} if state else {})},
                    summary={"conclusion": stored.to_dict()} if stored else {}, source="imported", owner="",
                    status="done", started_at=0.0, finished_at=None, rounds=len(records))


def page_says(experiment: str, records: list[Any], state: MachineState | None, stored: Conclusion | None,
              fake_api: Any) -> str:
    """The page's conclusion box for a run in this session's history (its state and conclusion on the run)."""
    run = BackgroundRun.recorded(experiment, {}, records, "the run")
    run.state, run.conclusion = state, stored  # as the run carries them once it has ended
    local = experiment == "roofline"  # its run controls exist for a local server only
    at: AppTest = app(history={experiment: [run]}, **({} if local else api_state(fake_api)))
    at.run()
    at.switch_page(EXPERIMENTS[experiment].page).run()
    assert not at.exception, at.exception
    return "\n".join(e.value for e in [*at.success, *at.info])


@pytest.mark.slow
@pytest.mark.parametrize("experiment", EVERY)
def test_the_page_the_report_and_the_cli_say_the_same_conclusion(experiment: str, fake_api: Any,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    spec = EXPERIMENTS[experiment]
    for records, state in ((spec.recorded()[1], None), (perturbed(experiment), None),
                           (spec.recorded()[1], BUSY)):
        said = paragraph(conclusion_of(spec, records, state, None), EN)
        assert said in page_says(experiment, records, state, None, fake_api)
        assert html.escape(said) in build_report([(saved(experiment, records, state, None), records)], EN)
        ended = BackgroundRun.recorded(experiment, {}, records, "the run")
        ended.state = state or MachineState()  # as `core.runs.session` leaves it when its records end
        ended.conclusion = spec.conclude(records, state)
        _report(argparse.Namespace(json=None, csv=None), [spec], {}, {spec.records: records}, {experiment: ended})
        assert capsys.readouterr().out.splitlines()[-2:] == [EN(f"{experiment}.title"), said]
    assert conclusion_of(spec, perturbed(experiment), None, None).status != "shown"


@pytest.mark.slow
def test_a_stored_conclusion_wins_over_one_computed_again(fake_api: Any) -> None:
    """A run that ended disturbed says so after a reload, in an export's report, though its records alone look fine."""
    spec = EXPERIMENTS["batch"]
    records: list[BatchLevel] = spec.recorded()[1]
    kept = Conclusion("batch", DISTURBED, Finding("busy", {"share": 42.0, "others": 9.5}))
    said = paragraph(kept, EN)
    assert said != paragraph(spec.conclude(records, None), EN)
    assert said in page_says("batch", records, None, kept, fake_api)
    assert html.escape(said) in build_report([(saved("batch", records, None, kept), records)], EN)


@pytest.mark.slow
def test_a_cli_run_reads_the_same_in_its_report(fake_api: Any, tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    """The real CLI on the fake API; its --json records, reported, say what it printed."""
    out = tmp_path / "run.json"
    assert main(["--backend", "api", "--url", fake_api.base_url, "--model", "ok", "--only", "output",
                 "--lengths", "8,16", "--json", str(out), "--no-save"]) == 0
    printed = capsys.readouterr().out.splitlines()
    _, records = from_json(out.read_text(), "rounds", EXPERIMENTS["output"].record)
    kept = json.loads(out.read_text())["summary"]["output"]  # the run's state and conclusion, as it stored them
    state = MachineState.from_dict(kept["state"]) if kept["state"] else None
    report = build_report([(saved("output", records, state, Conclusion.from_dict(kept["conclusion"])), records)], EN)
    assert printed[-2] == EN("output.title") and html.escape(printed[-1]) in report
    assert json.loads(out.read_text())["rounds"]
