"""The cache doctor page through AppTest: the break found and replayed, every format named, the audit and
the provider's measured hits shown, and input it cannot read reported as an error, never as healthy."""

from __future__ import annotations

import pytest

from tests.support.apptest import ROOT, api_state, app, rendered

FIXTURES = ROOT / "tests" / "data" / "doctor"


def upload(fake_api, name: str, data: bytes):
    at = app(**api_state(fake_api))
    at.switch_page("app_pages/cache_doctor.py").run()
    at.file_uploader(key="doctor_files").upload(name, data, "application/json").run()
    assert not at.exception
    return at


@pytest.mark.slow
def test_cache_doctor_page_finds_the_breaker_and_replays(fake_api):
    at = upload(fake_api, "agent.jsonl", (FIXTURES / "timestamp.jsonl").read_bytes())
    assert at.error[0].value.startswith("Round 3 broke the cache: a timestamp or date that changes, in message 0")
    assert "Move the time to the end" in rendered(at)
    assert "agent.jsonl: read as chat completions; 4 rounds." in [c.value for c in at.caption]
    table = at.dataframe[0].value
    assert list(table["breaks_cache"]) == [False, False, True, True]
    at.button(key="run_doctor").click().run()
    assert any("Done: 4 rounds" in s.value for s in at.success)
    assert len(fake_api.requests) == 4 and fake_api.requests[2]["body"]["tools"], "rounds replayed as logged"


@pytest.mark.slow
def test_captured_anthropic_log_shows_format_audit_and_measured_hits(fake_api):
    at = upload(fake_api, "captured.jsonl", (FIXTURES / "scenario_captured.jsonl").read_bytes())
    assert at.error[0].value.startswith("Round 3 broke the cache: a timestamp or date that changes, in message 0")
    assert "captured.jsonl: read as anthropic messages; 4 rounds." in [c.value for c in at.caption]
    subheaders = [h.value for h in at.subheader]
    assert "The provider's own hits next to the prediction" in subheaders and "Anthropic breakpoint audit" in subheaders
    measured = next(d.value for d in at.dataframe if "measured" in d.value.columns)
    assert list(measured["measured"]) == [0, 1400, 0, 0]
    assert measured["verdict"].iloc[3].startswith("the prefix was intact but the provider read less")
    audit = next(d.value for d in at.dataframe if "issues" in d.value.columns)
    assert audit["issues"].str.contains("a timestamp or id sits before it").all()
    assert at.selectbox(key="doctor_rule_transcript").value == "Anthropic"
    assert "python -m core capture --upstream URL --port P --out LOG.jsonl" in rendered(at)


@pytest.mark.slow
def test_cache_doctor_page_reports_bad_lines_and_bad_files(fake_api):
    at = upload(fake_api, "log.jsonl", (FIXTURES / "malformed.jsonl").read_bytes())
    warnings = [w.value for w in at.warning]
    assert any("line 2: not valid JSON" in w for w in warnings) and any("line 3" in w for w in warnings)
    assert any("2 lines could not be read and were not checked" in w for w in warnings)
    assert not any("No round breaks the cache" in s.value for s in at.success)
    at.file_uploader(key="doctor_files").set_value(("log.jsonl", "\u00e9t\u00e9".encode("latin-1"), "text/plain")).run()
    assert any("not valid UTF-8" in e.value for e in at.error) and not at.exception


def test_unrecognised_log_is_an_error_not_a_clean_bill(fake_api):
    at = upload(fake_api, "agent.jsonl", (FIXTURES / "unrecognised.jsonl").read_bytes())
    errors = [e.value for e in at.error]
    assert errors and errors[0].startswith("No round could be read from this input")
    assert "agent.jsonl line 1: expected a request body" in errors[0]
    assert not at.success and not at.dataframe
