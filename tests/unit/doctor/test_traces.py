"""Traces read as rounds: OTLP JSON exports captured from real instrumentation libraries by a public repository
(Grace/genai-interlingua's testdata: OpenInference and OpenLLMetry against a local mock of OpenAI, and the
pre-migration OpenLLMetry shape it keeps hand-built; tests/data/README.md says which is which). Each records
the same exchange, so each must read as the same prompt; the end-to-end trace made here is in
test_traces_e2e.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from core import doctor
from core.doctor import traces

TRACES = Path(__file__).resolve().parents[2] / "data" / "doctor" / "traces"
SYSTEM = "You are a support agent. Use the tools you are given."
LOOKUP = {"type": "function", "function": {
    "name": "lookup_order", "description": "Look up an order by its identifier.",
    "parameters": {"type": "object", "properties": {"order_id": {"type": "string"}}, "required": ["order_id"]}}}


@pytest.mark.parametrize("name,family,cached", [
    ("interlingua_openinference", traces.OPENINFERENCE, 256),
    ("interlingua_openllmetry", traces.GENAI, 256),
    ("interlingua_openllmetry_legacy", traces.OPENLLMETRY, None),  # it records cache writes only
])
def test_each_family_reads_the_prompt_the_tools_and_the_cached_tokens(name, family, cached):
    transcript = doctor.load_paths([TRACES / f"{name}.json"])
    assert transcript.kind == "trace" and not transcript.errors
    (round_,) = transcript.rounds
    assert family in transcript.notes[0]
    assert round_.chat == [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "Where is order A-1187?"}]
    assert round_.raw_tools == [LOOKUP] and round_.model == "gpt-4o-mini" and round_.gap is None
    assert (round_.measured.cached_tokens if round_.measured else None) == cached
    if round_.measured:
        assert round_.measured.prompt_tokens == 412
    decision = doctor.comparison(transcript, name)
    assert decision.kind == doctor.SINGLE_ROUND  # one span: nothing to compare, never "no break"


def test_three_libraries_recording_one_exchange_read_as_one_prompt():
    """The three exports in one file, one per line as the collector's file exporter writes them: three traces
    of the same request, in time order; the doctor sees the same prompt three times (no break)."""
    transcript = doctor.load_paths([TRACES / "interlingua_three_libraries.jsonl"])
    assert [r.source.split(" span ")[1] for r in transcript.rounds] == ["eee19b7ec3c1b174", "e9856d6fe698c4f2",
                                                                       "76a26812b532f640"]
    assert "3 LLM spans, one round each, from 3 traces (no session ids)" in transcript.notes[0]
    assert "2 other spans" in transcript.notes[0]
    analysis = doctor.analyse(transcript)
    assert [(f.breaks_cache, f.cause) for f in analysis.findings] == [(False, doctor.NONE)] * 3
    assert analysis.findings[2].common_prefix_chars == len(analysis.rendered[2].text)
    assert [f.measured_cached_tokens for f in analysis.findings] == [None, 256, 256]


def test_a_span_without_its_prompt_is_named_and_gets_no_verdict():
    """The OpenLLMetry capture with its content attributes dropped, as TRACELOOP_TRACE_CONTENT=false exports
    it: an LLM span, no prompt. And with the prompt cut to an exporter's limit, or redacted."""
    document = json.loads((TRACES / "interlingua_openllmetry.json").read_text())
    attributes = document["resourceSpans"][0]["scopeSpans"][0]["spans"][0]["attributes"]
    bare = [a for a in attributes if a["key"] not in ("gen_ai.input.messages", "gen_ai.output.messages")]
    cut = [dict(a, value={"stringValue": a["value"]["stringValue"][:64]}) if a["key"] == "gen_ai.input.messages"
           else a for a in attributes]
    rounds = []
    for variant in (attributes, bare, cut, attributes):
        document["resourceSpans"][0]["scopeSpans"][0]["spans"][0]["attributes"] = variant
        rounds += traces.read_documents([("t", json.loads(json.dumps(document)))]).rounds
    assert [r.gap for r in rounds][0] is None
    assert rounds[1].gap == ("the span records no prompt in its attributes or its events (content capture "
                             "is off in this instrumentation, or the content went to its logs)")
    assert rounds[2].gap.startswith("gen_ai.input.messages is not whole JSON (64 characters")
    analysis = doctor.analyse(doctor.Transcript(rounds, [], "trace"))
    # the last span holds its prompt again: compared with the last whole round (the first), not left uncompared
    assert [f.cause for f in analysis.findings] == [doctor.NONE, doctor.NOT_COMPARED, doctor.NOT_COMPARED,
                                                    doctor.NONE]
    assert analysis.findings[3].compared_with == 1
    assert all(not f.breaks_cache for f in analysis.findings[1:])
    assert all(f.verdict is None for f in analysis.findings[1:3])
    assert analysis.continuations() == {doctor.NOT_COMPARED: 2, doctor.EARLIER: 1}


def test_a_request_log_is_never_read_as_a_trace():
    cassettes = Path(__file__).resolve().parents[2] / "data" / "doctor" / "cassettes"
    assert doctor.load_paths([cassettes / "crewai__crew_kickoff_usage_metrics.jsonl"]).kind == "jsonl"
    assert traces.read_text('{"messages": []}\n', "x") is None and traces.read_text("[1]", "x") is None
