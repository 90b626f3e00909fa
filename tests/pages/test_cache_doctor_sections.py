"""The cache doctor page's new sections through AppTest: the format selector and a mixed log, the provider's
own diagnosis beside the doctor's, what the payload cannot show, and the timeline of the rounds."""

from __future__ import annotations

import pytest

from tests.support.apptest import ROOT, api_state, app

FIXTURES = ROOT / "tests" / "data" / "doctor"


def upload(fake_api, path, name: str = "agent.jsonl"):
    at = app(**api_state(fake_api))
    at.switch_page("app_pages/cache_doctor.py").run()
    at.file_uploader(key="doctor_files").upload(name, path.read_bytes(), "application/json").run()
    assert not at.exception
    return at


@pytest.mark.slow
def test_provider_diagnosis_unexplained_miss_and_timeline(fake_api):
    at = upload(fake_api, FIXTURES / "diagnostics_anthropic.jsonl")
    subheaders = [h.value for h in at.subheader]
    assert "The provider's own diagnosis beside the doctor's" in subheaders
    assert "What the payload cannot show" in subheaders
    assert any(e.value.startswith("Round 5: the provider says messages_changed (messages), the doctor says")
               and "They disagree" in e.value for e in at.error)
    diagnosis = next(d.value for d in at.dataframe if "provider's reason" in d.value.columns)
    assert list(diagnosis["provider's reason"]) == ["system_changed", "messages_changed"]
    assert list(diagnosis["verdict"]) == ["agrees", "disagrees"]
    assert any(w.value.startswith("Round 3 missed on Anthropic's side, not in your prompt")
               and "exceeds the cache's lifetime" in w.value for w in at.warning)  # its lifetime ran out: theirs
    assert any("the line is the provider's cache lifetime (300 s)" in c.value for c in at.caption)


@pytest.mark.slow
def test_a_mixed_log_is_named_and_the_format_can_be_chosen(fake_api):
    at = upload(fake_api, FIXTURES / "cassettes" / "pydantic-ai__thinking_with_tool_calls_from_other_model.jsonl")
    assert any("This log mixes formats" in w.value for w in at.warning)
    assert not at.error, "a mix is not a cache break"
    at.selectbox(key="doctor_format").set_value("responses").run()
    assert not at.exception
    assert any("line 3" in w.value for w in at.warning), "the Gemini line cannot be read as Responses: named"
    assert "agent.jsonl: read as responses; 2 rounds." in [c.value for c in at.caption]
