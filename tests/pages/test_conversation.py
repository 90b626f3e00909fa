"""Experiment 7's page (AppTest) with its recorded run: the prediction before the run, the metrics and charts of
the recorded run, its conclusion; and the cache doctor's compaction finding quoting what it measured."""

from __future__ import annotations

import pytest

from core.conclusions import render
from core.experiments import conversation as ex
from core.experiments import input_length
from core.words import ContentWords
from tests.support.apptest import ROOT, api_state, app, chart_values, rendered

pytestmark = pytest.mark.slow

COMPACTED = ROOT / "tests" / "data" / "doctor" / "cassettes" / "pydantic-ai__openai_responses_compact_messages.jsonl"


def test_recorded_run_shows_strategies_prediction_and_pause(fake_api):
    at = app(**api_state(fake_api))
    at.run()
    at.switch_page("app_pages/conversation.py").run()
    assert not at.exception and not at.error, (at.exception, [e.value for e in at.error])
    prediction = next(m.value for m in at.markdown if m.value.startswith("**Predicted before the run:**"))
    assert "follow from the script" in prediction
    assert "no provider reuses shifted chunks" in rendered(at), "an API is told what it cannot run"
    at.button(key="recorded_conversation").click().run()
    assert not at.exception and not at.error, (at.exception, [e.value for e in at.error])
    rows = at.session_state["history"][ex.ID][-1].rows
    found = ex.summarize(rows)
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["keep recomputed"] == f"{found['keep'].recomputed:,}"
    assert metrics["Rounds as predicted"] == f"{sum(s.exact for s in found.values())} / " \
                                             f"{sum(s.rounds for s in found.values())}"
    values = chart_values(at)
    names = {v.get("name") for v in values}
    assert {"keep everything", "sliding window", "cache gone", "cache restored"} <= names
    assert any("usd" in v for v in values) and any("predicted_recomputed" in v for v in values)
    verdict = " ".join(s.value for s in at.success) + " ".join(i.value for i in at.info)
    assert render(ex.conclude(rows), ContentWords("en"))[0] in verdict


def test_the_prediction_takes_experiment_1s_curve_once_it_has_run(fake_api):
    """With experiment 1's recorded run in the session, the time is predicted from its curve: the rate is its
    linear term and the sentence says how much each 1,000 tokens of context add (the same numbers as core's)."""
    at = app(**api_state(fake_api))
    at.run()
    at.switch_page("app_pages/input.py").run()
    at.button(key="recorded_input").click().run()
    at.switch_page("app_pages/conversation.py").run()
    assert not at.exception and not at.error, (at.exception, [e.value for e in at.error])
    curve = input_length.summarize_input(at.session_state["history"][input_length.ID][-1].rows).prefill_curve
    assert curve is not None
    prediction = next(m.value for m in at.markdown if m.value.startswith("**Predicted before the run:**"))
    assert f"at {1000 / curve.b:,.0f} " in prediction and "measured by experiment 1" in prediction
    assert f"adds {2 * round(curve.c * 1e6, 3) / 1000:,.2f} ms per new token for every 1,000 tokens" in prediction


def test_the_doctor_prices_a_compaction_with_what_experiment_7_measured(fake_api):
    at = app(**api_state(fake_api))
    at.run()
    at.switch_page("app_pages/cache_doctor.py").run()
    at.file_uploader(key="doctor_files").upload("compact.jsonl", COMPACTED.read_bytes(), "application/json").run()
    assert "Experiment 7 measures what a compaction costs" in rendered(at), "before a run: the offer"
    at.switch_page("app_pages/conversation.py").run()
    at.button(key="recorded_conversation").click().run()
    at.switch_page("app_pages/cache_doctor.py").run()
    at.file_uploader(key="doctor_files").upload("compact.jsonl", COMPACTED.read_bytes(), "application/json").run()
    figure = ex.doctor_figure(at.session_state["history"][ex.ID][-1].rows)
    assert figure is not None
    assert f"a summary round recomputed a median {figure['summary_tokens']:,.0f} tokens" in rendered(at)


def test_an_unreadable_upload_is_said_and_the_script_keeps_its_own_reference(fake_api):
    """The same upload path as experiment 3's page (`ui.runs.uploaded`): a binary file is refused with a sentence and
    the default reference text stays; a text file is named and used."""
    at = app(**api_state(fake_api))
    at.switch_page("app_pages/conversation.py").run()
    at.file_uploader(key="conversation_upload").upload("photo.png", b"\x89PNG\x00\x00\x01binary", "image/png").run()
    assert any("photo.png" in e.value and "binary" in e.value for e in at.error)
    assert not at.exception
    at.file_uploader(key="conversation_upload").upload("notes.txt", "OUR HOTEL RULES. ".encode() * 40,
                                                        "text/plain").run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    assert any("notes.txt" in c.value for c in at.caption)
