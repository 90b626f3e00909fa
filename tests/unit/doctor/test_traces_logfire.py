"""Pydantic Logfire's spans as the OpenTelemetry SDK's ``ConsoleSpanExporter`` wrote them, added to
``logfire.configure(send_to_logfire=False, additional_span_processors=[...])`` around ``logfire.instrument_openai()``
calls to the embedded llama-server (tests/data/doctor/traces/logfire/calls.py, byte for byte): by default GenAI's
attributes as JSON strings (``request_data`` the model alone, the cached count left out when zero, the provider's
usage in ``gen_ai.usage.raw``); with ``version=1`` the whole request body in ``request_data``. And Logfire's own
console lines, which hold no request: refused with a sentence. The script sets up which round breaks."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from core import doctor
from core.doctor import traces
from core.words import ContentWords, in_words

LOGFIRE = Path(__file__).resolve().parents[2] / "data" / "doctor" / "traces" / "logfire"


def _analyse(name: str) -> tuple[doctor.Transcript, doctor.Analysis]:
    transcript = doctor.load_paths([LOGFIRE / name])
    assert transcript.kind == "trace" and not transcript.errors and not transcript.unused, transcript.errors
    return transcript, doctor.analyse(transcript)


@pytest.mark.parametrize(("name", "kind", "first_cached"), [
    ("console_break.json", "OpenTelemetry GenAI", 0), ("console_request_data_break.json", "Pydantic Logfire", 41)])
def test_the_new_time_on_round_3_is_found_in_message_0_with_the_servers_counts(name, kind, first_cached):
    """Both of Logfire's attribute versions: four calls, one round each, the tools read, the new time in the system
    prompt found on round 3 at message 0's content. Every round has its measured count, round 1's too: Logfire
    leaves out a zero cached count, and ``gen_ai.usage.raw`` says it (or, on the second file, the server kept the
    first prompt from the conversation before)."""
    transcript, analysis = _analyse(name)
    assert transcript.notes[0].startswith(f"read as a trace ({kind}") and "4 LLM spans, one round each" in \
        transcript.notes[0]
    assert [len(r.messages) for r in transcript.rounds] == [2, 4, 6, 8]
    assert [r.tool_names() for r in transcript.rounds] == [["get_weather"]] * 4
    assert [(f.breaks_cache, f.cause, f.message_index, f.field) for f in analysis.findings] == [
        (False, doctor.NONE, None, None), (False, doctor.NONE, None, None), (True, doctor.TIMESTAMP, 0, "content"),
        (False, doctor.NONE, None, None)]
    cached = [r.measured.cached_tokens for r in transcript.rounds if r.measured]
    assert len(cached) == 4 and cached[0] == first_cached
    assert cached[2] < cached[1] < cached[3]  # the server's own cache stopped at the system prompt on round 3


def test_the_zero_logfire_leaves_out_is_read_from_the_providers_usage():
    transcript, _ = _analyse("console_break.json")
    first = transcript.rounds[0].measured
    assert first is not None and (first.cached_tokens, first.source) == (0, "cached_tokens")
    assert {r.measured.source for r in transcript.rounds[1:] if r.measured} == {"cache_read"}


def test_without_a_break_every_round_is_compared():
    transcript, analysis = _analyse("console_no_break.json")
    assert [f.cause for f in analysis.findings] == [doctor.NONE] * 4
    assert all(f.common_prefix_chars > 0 and not f.not_compared for f in analysis.findings[1:])
    assert all(r.measured is not None for r in transcript.rounds)


@pytest.mark.parametrize("name", ["logfire_console.txt", "stdout.log"])
def test_logfires_console_lines_are_refused_with_what_to_export_instead(name):
    """What ``logfire.configure()`` prints (one line per span, no request) is never read as a system prompt nor
    given an all-clear: one sentence names the file and line and the exporter to use, in both languages, whatever
    the file is called."""
    data = (LOGFIRE / "logfire_console.txt").read_bytes()
    with pytest.raises(doctor.TranscriptError) as refused:
        doctor.load_inputs([(name, data)])
    said = str(refused.value)
    assert said.startswith(f"{name} line 1 is Logfire's console output (one line per span")
    assert "ConsoleSpanExporter" in said and said.count(". ") == 0  # one sentence
    chinese = in_words(refused.value.args[0], ContentWords("zh"))
    assert chinese.startswith(f"{name} 第 1 行是 Logfire 的控制台输出") and "ConsoleSpanExporter" in chinese


def test_text_that_only_starts_like_a_console_line_is_still_a_prompt():
    assert traces.console_lines("You are a helpful assistant.\nThe time is 18:00.\n", "prompt.txt") is None
    transcript = doctor.load_inputs([("prompt.txt", b"You are a helpful assistant. It is 18:00:00.000 now.\n")])
    assert transcript.kind == "system_prompt"


def test_request_data_that_holds_no_request_is_named():
    """A Logfire span whose ``request_data`` is the model alone and whose content is not in GenAI's attributes
    (content left out): the round names what ``request_data`` holds, never an all-clear."""
    attributes = {"request_data": '{"model":"smollm2"}', "logfire.msg_template": "Chat Completion with {m}",
                  "gen_ai.request.model": "smollm2"}
    assert traces.family(attributes) == traces.LOGFIRE
    span = doctor_span(attributes)
    assert traces.span_round(span, traces.LOGFIRE).gap == (
        "request_data holds the keys ['model'], not a request's messages, and the span has no gen_ai.input.messages "
        "(Logfire wrote this call's content elsewhere, or not at all): nothing to compare")
    # the default version, its content in GenAI's attributes: read by GenAI's reader
    assert traces.family({**attributes, "gen_ai.input.messages": "[]"}) == traces.GENAI


def doctor_span(attributes: dict[str, object]) -> traces.Span:
    return traces.Span("t", "s", 1, "Chat Completion with {m}", dict(attributes), "f span s")


@pytest.mark.slow
def test_the_cli_fails_on_the_break_and_refuses_the_console_lines():
    """``doctor --fail-on-break`` on the request_data trace: exit 1, the break named at round 3, message 0; on
    Logfire's console lines: exit 2 and the sentence, never an all-clear."""
    proc = _doctor(LOGFIRE / "console_request_data_break.json")
    assert proc.returncode == 1, proc.stderr
    assert "round 3: timestamp in message 0" in proc.stdout
    proc = _doctor(LOGFIRE / "logfire_console.txt")
    assert proc.returncode == 2 and not proc.stdout.strip()
    assert proc.stderr.startswith("error: logfire_console.txt line 1 is Logfire's console output")


def _doctor(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "core", "doctor", "--fail-on-break", str(path)],
                          capture_output=True, text=True, timeout=120)
