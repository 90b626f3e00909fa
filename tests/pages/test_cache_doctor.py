"""The cache doctor page through AppTest: the break found and replayed, every format named, the audit and
the provider's measured hits shown, and input it cannot read reported as an error, never as healthy."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.support.apptest import ROOT, api_state, app, rendered

FIXTURES = ROOT / "tests" / "data" / "doctor"


def upload(fake_api, name: str, data: bytes, lang: str = "en"):
    at = app(**api_state(fake_api), lang=lang)
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
    assert any(w.value.startswith("Round 4 missed on Anthropic's side, not in your prompt: it kept its first 1,513 "
                                  "tokens from round 3") for w in at.warning)
    audit = next(d.value for d in at.dataframe if "issues" in d.value.columns)
    assert audit["issues"].str.contains("a timestamp or id sits before it").all()
    assert at.selectbox(key="doctor_rule_transcript").value == "Anthropic"
    assert "python -m core capture --upstream URL --port P --out LOG.jsonl" in rendered(at)


@pytest.mark.slow
def test_cache_doctor_page_reports_bad_lines_and_bad_files(fake_api):
    at = upload(fake_api, "log.jsonl", (FIXTURES / "malformed.jsonl").read_bytes())
    warnings = [w.value for w in at.warning]
    assert any("line 2: not valid JSON" in w for w in warnings) and any("line 3" in w for w in warnings)
    assert any("could not be read and were not checked (lines not read: 2)" in w for w in warnings)
    assert not any("No round breaks the cache" in s.value for s in at.success)
    at.file_uploader(key="doctor_files").set_value(("log.jsonl", "\u00e9t\u00e9".encode("latin-1"), "text/plain")).run()
    assert any("not valid UTF-8" in e.value for e in at.error) and not at.exception


def test_unrecognised_log_is_an_error_not_a_clean_bill(fake_api):
    at = upload(fake_api, "agent.jsonl", (FIXTURES / "unrecognised.jsonl").read_bytes())
    errors = [e.value for e in at.error]
    assert errors and errors[0].startswith("No round could be read from this input")
    assert "agent.jsonl line 1: expected a request body" in errors[0]
    assert not at.success and not at.dataframe


@pytest.mark.slow
def test_an_exported_trace_is_read_on_the_page_as_uploaded(fake_api):
    """Three instrumentations' OTLP JSON exports of one exchange, one per line: read without converting, the
    three rounds the same prompt, the provider's cached tokens shown; and no green "every round extends" box,
    since the rounds are three traces (other conversations by their ids, one prompt by their content)."""
    at = upload(fake_api, "traces.jsonl", (FIXTURES / "traces" / "interlingua_three_libraries.jsonl").read_bytes())
    text = rendered(at)
    assert "read as a trace (OpenInference, OpenLLMetry (gen_ai.prompt.*), OpenTelemetry GenAI)" in text
    assert list(at.dataframe[0].value["breaks_cache"]) == [False] * 3
    assert list(at.dataframe[0].value["measured_cached_tokens"].fillna(-1)) == [-1, 256, 256]


@pytest.mark.slow
@pytest.mark.parametrize("path", ["mlflow/trace_break.json", "phoenix/break_dataframe.jsonl",
                                  "phoenix/break_trace_dataset.parquet",
                                  "siblings/console_litellm_openinference.json"])
def test_mlflow_phoenix_and_sibling_spans_dropped_on_the_page_show_the_break(fake_api, path):
    """An MLflow trace, Phoenix's dataframe one row per line or saved by TraceDataset.save() as Parquet, and two
    instrumentations' sibling spans, uploaded as the tools wrote them: the break on round 3 in message 0 is the
    page's answer."""
    at = upload(fake_api, Path(path).name, (FIXTURES / "traces" / path).read_bytes())
    assert at.error[0].value.startswith("Round 3 broke the cache: a timestamp or date that changes, in message 0")
    assert list(at.dataframe[0].value["breaks_cache"]) == [False, False, True, False]
    assert "read as a trace (" in rendered(at)


def test_a_damaged_parquet_upload_is_named_in_the_visitors_language(fake_api):
    """Phoenix's Parquet cut in half (a download that stopped): the page's error names the file, in Chinese."""
    data = (FIXTURES / "traces" / "phoenix" / "break_dataframe.parquet").read_bytes()
    at = upload(fake_api, "spans.parquet", data[:len(data) // 2], lang="zh")
    assert "spans.parquet 以 Parquet 文件开头，却无法按 Parquet 读取" in at.error[0].value, at.error[0].value


@pytest.mark.slow
def test_a_value_early_in_the_prompt_is_named_on_the_page_and_other_conversations_are_never_all_clear(fake_api):
    at = upload(fake_api, "kickoff.jsonl", (FIXTURES / "cassettes" / "crewai__crew_kickoff_usage_metrics.jsonl")
                .read_bytes())
    assert at.error[0].value.startswith("Round 2 broke the cache: another conversation from the same prompt")
    assert "the value “dog” became “cat” early in it" in rendered(at)
    assert "Move the value that changes after the fixed part" in rendered(at)
    at = upload(fake_api, "planner.jsonl", (FIXTURES / "cassettes" /
                                             "crewai__agent_kickoff_multi_step_task_with_planning.jsonl").read_bytes())
    assert not at.success or not any("every round extends" in s.value for s in at.success)
    assert any("start another conversation" in i.value for i in at.info)


def test_the_rendering_is_named_in_the_visitors_language(fake_api):
    at = upload(fake_api, "agent.jsonl", (FIXTURES / "timestamp.jsonl").read_bytes(), lang="zh")
    captions = [c.value for c in at.caption]
    assert any("稳定序列化" in c for c in captions) and not any("stable serialization" in c for c in captions)


@pytest.mark.slow
def test_a_trace_on_the_chinese_page_is_noted_and_its_rule_described_in_chinese(fake_api):
    """Two instrumentations of one SDK call (tests/data/doctor/traces/sdk, as the OpenTelemetry SDK wrote it):
    the notes of what was read and the provider rule's description in Chinese, not the English core/ prints."""
    trace = FIXTURES / "traces" / "sdk" / "console_two_instrumentations.json"
    at = upload(fake_api, "trace.json", trace.read_bytes(), lang="zh")
    captions = [c.value for c in at.caption]
    assert any(c.startswith("按轨迹读取") and "8 个LLM span，合为 4 次调用" in c for c in captions), captions
    assert any("个LLM span嵌套在同一次调用的另一条记录中" in c for c in captions), captions
    rule = next(c for c in captions if c.startswith("规则："))
    assert "read as a trace" not in " ".join(captions) and re.search(r"规则：[^A-Za-z]{8}", rule), rule
