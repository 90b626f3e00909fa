"""Two instrumentations writing one call as two spans side by side (tests/data/doctor/traces/siblings/calls.py,
byte for byte): LiteLLM's ``otel`` callback writes ``litellm_request`` after the call, beside OpenInference's
``ChatCompletion`` under the agent's span, not around it. One call, one round, and the merge said."""

from __future__ import annotations

from pathlib import Path

from core import doctor

SIBLINGS = Path(__file__).resolve().parents[2] / "data" / "doctor" / "traces" / "siblings"


def test_side_by_side_records_of_each_call_are_one_round_and_the_break_is_found():
    transcript = doctor.load_paths([SIBLINGS / "console_litellm_openinference.json"])
    assert transcript.kind == "trace" and not transcript.errors
    assert "8 LLM spans as 4 calls" in transcript.notes[0]
    assert "(OpenInference, OpenTelemetry GenAI)" in transcript.notes[0]
    assert any(n.startswith("4 LLM spans written beside another record of the same call (one parent, overlapping "
                            "in time, the same model and messages") for n in transcript.notes)
    assert [len(r.messages) for r in transcript.rounds] == [2, 4, 6, 8]
    assert [r.tool_names() for r in transcript.rounds] == [["get_weather"]] * 4
    analysis = doctor.analyse(transcript)
    assert [(f.breaks_cache, f.cause, f.message_index, f.field) for f in analysis.findings] == [
        (False, doctor.NONE, None, None), (False, doctor.NONE, None, None), (True, doctor.TIMESTAMP, 0, "content"),
        (False, doctor.NONE, None, None)]
    assert all(r.measured is not None for r in transcript.rounds)  # OpenInference's cached count, kept in the merge
