"""The doctor page's samples: one click reads a real recording (samples/doctor/), and the visitor's own upload
replaces it."""

from __future__ import annotations

import pytest

from tests.support.apptest import ROOT, api_state, app


@pytest.mark.slow
def test_a_sample_is_one_click_away_and_an_upload_replaces_it(fake_api):
    at = app(**api_state(fake_api))
    at.switch_page("app_pages/cache_doctor.py").run()
    assert not at.exception and "Nothing to analyse yet." in [i.value for i in at.info]
    at.button(key="doctor_sample_trace").click().run()
    assert not at.exception
    captions = [c.value for c in at.caption]
    assert any(c.startswith("Reading the sample: A C# agent on Gemini 2.5 Flash") for c in captions)
    assert any(c.startswith("read as a Langfuse export: 3 generations") for c in captions)
    assert at.error[0].value.startswith("Round 3 broke the cache: tools added, removed or redefined, in the tool list")
    at.button(key="doctor_sample_agent_log").click().run()
    assert any("crewai_hierarchical_process.jsonl: read as chat completions; 6 rounds." == c.value for c in at.caption)
    infos = [i.value for i in at.info]
    assert any(i.startswith("Simulated with this rule, not measured: as sent,") for i in infos)
    assert any(c.value.startswith("Measured by the provider in the log: 1,408 cached tokens over the 6 rounds")
               for c in at.caption)  # the provider's own count beside the simulation
    log = (ROOT / "tests" / "data" / "doctor" / "timestamp.jsonl").read_bytes()
    at.file_uploader(key="doctor_files").upload("agent.jsonl", log, "application/json").run()
    assert not any(c.value.startswith("Reading the sample") for c in at.caption)
    assert at.error[0].value.startswith("Round 3 broke the cache: a timestamp or date that changes")
