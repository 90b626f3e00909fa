"""The OpenTelemetry SDK's own span JSON, as its exporters wrote it here around real OpenAI-SDK calls to the embedded
llama-server (tests/data/doctor/traces/sdk/generate.py, byte for byte): ``ConsoleSpanExporter`` to a file (pretty
objects concatenated), one object per line, and OTLP JSON; OpenInference and GenAI attributes, both
instrumentations at once (every call recorded twice, nested). The script sets up which round breaks and why."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from core import doctor
from core.doctor import spans, traces

SDK = Path(__file__).resolve().parents[2] / "data" / "doctor" / "traces" / "sdk"


def _analyse(path: Path) -> tuple[doctor.Transcript, doctor.Analysis]:
    transcript = doctor.load_paths([path])
    assert transcript.kind == "trace" and not transcript.errors, transcript.errors
    return transcript, doctor.analyse(transcript)


@pytest.mark.parametrize("name", ["console_two_instrumentations.json", "otlp_two_instrumentations.jsonl"])
def test_two_instrumentations_one_round_per_call_and_the_break_found(name):
    """OpenInference's span sits inside the GenAI instrumentation's span of the same call: 8 spans, 4 calls. The
    new time in the system prompt on round 3 is found, at message 0; the other rounds extend the one before."""
    transcript, analysis = _analyse(SDK / name)
    assert "8 LLM spans as 4 calls" in transcript.notes[0]
    assert any(n.startswith("4 LLM spans nested in another record of the same call") for n in transcript.notes)
    assert [len(r.messages) for r in transcript.rounds] == [2, 4, 6, 8]
    assert [r.tool_names() for r in transcript.rounds] == [["get_weather"]] * 4  # OpenInference's, the fuller
    assert [(f.breaks_cache, f.cause, f.message_index) for f in analysis.findings] == [
        (False, doctor.NONE, None), (False, doctor.NONE, None), (True, doctor.TIMESTAMP, 0), (False, doctor.NONE, None)]
    assert all(r.measured is not None for r in transcript.rounds)  # llama-server's cached tokens, as recorded
    assert transcript.rounds[1].measured.cached_tokens > 0


def test_console_output_without_a_break_compares_every_round():
    transcript, analysis = _analyse(SDK / "console_openinference.json")
    assert [f.cause for f in analysis.findings] == [doctor.NONE] * 4
    assert all(f.common_prefix_chars > 0 and not f.not_compared for f in analysis.findings[1:])


def test_one_span_per_line_without_tool_definitions_compares_the_messages():
    """The GenAI instrumentation records no tool list here: the messages are compared (the break on round 2 is
    found) and the notes say the tools could not be seen, and where the doctor looked."""
    transcript, analysis = _analyse(SDK / "lines_genai.jsonl")
    assert [(f.breaks_cache, f.cause) for f in analysis.findings] == [
        (False, doctor.NONE), (True, doctor.TIMESTAMP), (False, doctor.NONE), (False, doctor.NONE)]
    assert any(n.startswith("the spans record no tool definitions (looked in") and "gen_ai.tool.definitions" in n
               for n in transcript.notes)


def test_prompts_cut_by_the_sdk_are_refused_per_round_with_a_sentence():
    """The SDK's attribute limit (64 characters here) cut every ``gen_ai.input.messages``: nothing compared, each
    round says which attribute, how long and how it ends."""
    transcript, analysis = _analyse(SDK / "console_genai_cut.json")
    assert all(f.cause == doctor.NOT_COMPARED for f in analysis.findings)
    assert all("gen_ai.input.messages is not whole JSON (64 characters" in (r.gap or "") for r in transcript.rounds)


def test_a_banner_before_the_spans_is_skipped(tmp_path):
    """A host that prints a line before the console exporter's spans (OpenLLMetry prints one to the same
    stdout): the banner is skipped, the spans read as without it."""
    path = tmp_path / "console.txt"
    path.write_text("Traceloop exporting traces to a custom exporter\n"
                    + (SDK / "console_openinference.json").read_text())
    transcript, analysis = _analyse(path)
    assert [f.cause for f in analysis.findings] == [doctor.NONE] * 4


def test_a_file_cut_mid_span_reads_the_spans_before_and_names_the_cut(tmp_path):
    """The console exporter's file with a last span cut mid-write (a process killed): the four whole spans are
    read and compared, and the cut is an error naming its line, never a refusal of the whole file."""
    text = (SDK / "console_openinference.json").read_text()
    path = tmp_path / "broken.json"
    path.write_text(text + "{\n    \"name\": \n")
    transcript = doctor.load_paths([path])
    assert len(transcript.rounds) == 4 and len(transcript.errors) == 1
    assert re.match(r"broken.json line 2\d\d: not valid JSON \(.*\): the spans after it were not read",
                    transcript.errors[0])
    assert [f.cause for f in doctor.analyse(transcript).findings] == [doctor.NONE] * 4


def test_the_documents_of_a_file_in_every_layout():
    one = '{"a": 1}'
    assert spans.documents(one, "f") == ([("f", {"a": 1})], None)
    assert spans.documents('{"a": 1}\n{"b": 2}\n', "f")[0] == [("f line 1", {"a": 1}), ("f line 2", {"b": 2})]
    assert spans.documents('banner\n{\n "a": 1\n}{"b":\n 2}', "f")[0] == [("f line 2", {"a": 1}),
                                                                           ("f line 4", {"b": 2})]
    assert spans.documents("no json here", "f") == ([], "f line 1: not JSON")
    # the error names the line and column where the JSON breaks, in words (not "starting at)")
    assert spans.documents('banner\n{"a": 1}\n{\n "b": "cut', "f") == (
        [("f line 2", {"a": 1})], "f line 4: not valid JSON (Unterminated string starting at column 7)")
    assert traces.read_text('{"messages": []}\n', "x") is None


def test_the_vercel_ai_sdk_span_list_read_with_its_parts_tools_and_cached_tokens():
    """The AI SDK's ``ai.generateText.doGenerate`` spans (``ai.prompt.messages``, ``ai.prompt.tools``,
    ``ai.usage.cachedInputTokens``) in the OTel JS SDK's span records (tests/data/doctor/traces/vercel/generate.mjs):
    one round per model call (the ``ai.generateText`` spans around them are not calls), the new time on round 3
    found, and the server's own cached count there shows the cache stopped at the system prompt."""
    transcript, analysis = _analyse(SDK.parent / "vercel" / "ai_sdk_spans.json")
    assert "Vercel AI SDK" in transcript.notes[0] and "4 LLM spans, one round each" in transcript.notes[0]
    assert [r.tool_names() for r in transcript.rounds] == [["get_weather"]] * 4
    assert [(f.breaks_cache, f.cause, f.message_index) for f in analysis.findings] == [
        (False, doctor.NONE, None), (False, doctor.NONE, None), (True, doctor.TIMESTAMP, 0), (False, doctor.NONE, None)]
    cached = [r.measured.cached_tokens for r in transcript.rounds if r.measured]
    assert len(cached) == 4 and cached[0] == 0 and cached[2] < cached[1] < cached[3]


def test_the_vercel_ai_sdk_without_a_break_and_without_its_inputs():
    """The same conversation with the time kept: every round compared, none breaks. With ``recordInputs: false``
    the spans hold no prompt: each round says so, nothing is compared."""
    transcript, analysis = _analyse(SDK.parent / "vercel" / "ai_sdk_no_break.json")
    assert [f.cause for f in analysis.findings] == [doctor.NONE] * 4
    assert all(f.common_prefix_chars > 0 and not f.not_compared for f in analysis.findings[1:])
    transcript, analysis = _analyse(SDK.parent / "vercel" / "ai_sdk_no_inputs.json")
    assert [f.cause for f in analysis.findings] == [doctor.NOT_COMPARED] * 4
    assert all(r.gap and r.gap.startswith("the span records no prompt in its attributes or its events")
               for r in transcript.rounds)


def test_a_cache_key_rotated_in_the_invocation_parameters_is_found_and_named():
    """OpenInference's ``llm.invocation_parameters`` carry ``prompt_cache_key``; the agent rotates it on round 3
    with the messages kept (sdk/params.py): the break is the parameter, named with both values."""
    transcript, analysis = _analyse(SDK / "console_openinference_cache_key.json")
    assert [(f.breaks_cache, f.cause, f.field) for f in analysis.findings] == [
        (False, doctor.NONE, None), (False, doctor.NONE, None), (True, doctor.PARAMS_CHANGED, "params"),
        (False, doctor.NONE, None)]
    assert [r.keyed for r in transcript.rounds] == [{"prompt_cache_key": "weather-desk-a"}] * 2 + [
        {"prompt_cache_key": "weather-desk-b"}] * 2
    third = analysis.findings[2]
    assert (third.parameter, third.old_value, third.new_value) == ("prompt_cache_key", '"weather-desk-a"',
                                                                   '"weather-desk-b"')  # as JSON, as written
