"""Langfuse traces as its own worker stores them (langfuse/langfuse ``worker/src/__tests__/chatml/framework-traces``,
byte for byte; tests/data/README.md): ``input``, ``metadata`` and the kept span attributes are JSON strings, decoded
here, and every call the data allows is compared. Expected rounds checked by hand against each file."""

from __future__ import annotations

import json
from pathlib import Path

from core import doctor

LANGFUSE = Path(__file__).resolve().parents[2] / "data" / "doctor" / "traces" / "langfuse"


def _analyse(name: str) -> tuple[doctor.Transcript, doctor.Analysis]:
    transcript = doctor.load_paths([LANGFUSE / f"{name}.trace.json"])
    assert transcript.kind == "trace" and not transcript.errors
    return transcript, doctor.analyse(transcript)


def test_json_string_inputs_are_read_and_the_rounds_compared():
    """LangGraph (Python): ``input`` is a JSON string of chat messages with the tools appended as ``role: tool``
    messages; the second call extends the first, compared, no break."""
    transcript, analysis = _analyse("langgraph-python-2025-08-22")
    assert [r.gap for r in transcript.rounds] == [None, None]
    assert [r.tool_names() for r in transcript.rounds] == [["Web-Search"]] * 2
    assert [(f.breaks_cache, f.cause) for f in analysis.findings] == [(False, doctor.NONE)] * 2
    assert analysis.findings[1].common_prefix_chars > 0 and not analysis.findings[1].not_compared


def test_a_real_break_a_tool_list_cut_down_for_the_final_answer():
    """A C# agent on Gemini through OpenTelemetry: the system prompt and the tools are in the kept span
    (``gen_ai.system_instructions``, ``gen_ai.tool.definitions``), the messages in ``input`` (Langfuse moves
    ``gen_ai.input.messages`` there). The third call keeps only ``final_result`` of three tools: a real break."""
    transcript, analysis = _analyse("csharp-agent-with-gemini-2026-03-09")
    assert [len(r.messages) for r in transcript.rounds] == [2, 4, 5]
    assert transcript.rounds[0].messages[0].role == "system"
    assert transcript.rounds[1].tool_names() == ["get_adset_infos", "get_custom_report", "final_result"]
    assert transcript.rounds[2].tool_names() == ["final_result"]
    assert [(f.breaks_cache, f.cause) for f in analysis.findings] == [
        (False, doctor.NONE), (False, doctor.NONE), (True, doctor.TOOLS_CHANGED)]


def test_a_call_that_sends_only_the_tool_result_is_server_history():
    """Microsoft's agent framework on the Responses API: the second call's input is the tool's result alone (the
    history lives on the server): said so, never "history edited"."""
    transcript, analysis = _analyse("microsoft-agent-2025-12-17")
    assert [r.tool_names() for r in transcript.rounds] == [["get_weather"]] * 2  # from gen_ai.tool.definitions
    assert [f.cause for f in analysis.findings] == [doctor.NONE, doctor.SERVER_HISTORY]
    assert any("starts with a tool's result" in note for note in transcript.notes)


def test_lifecycle_records_are_left_out_and_said():
    """BeeAI writes a generation per event of a call (start, success, finish); the two without input are no
    requests: left out, with a note; the three with their prompt are compared."""
    transcript, analysis = _analyse("beeai-2025-08-01")
    assert len(transcript.rounds) == 3 and all(r.gap is None for r in transcript.rounds)
    assert "2 generations hold no input" in " ".join(transcript.notes)
    assert [f.cause for f in analysis.findings] == [doctor.NONE] * 3
    assert all(f.common_prefix_chars > 0 for f in analysis.findings[1:])


def test_nested_generations_of_one_call_are_one_round():
    """agno: ``OpenAIChat.invoke`` (OpenInference, whole messages in its span) around ``chat gpt-4o-mini`` (the
    prompt flattened to text): one round per call, from the fuller record. The Vercel AI SDK's ``ai.generateText``
    (the prompt alone) around ``ai.generateText.doGenerate`` (the messages): one round."""
    transcript, analysis = _analyse("agno-2025-06-11")
    assert len(transcript.rounds) == 2 and all(r.gap is None for r in transcript.rounds)
    assert "read as a Langfuse export: 4 generations as 2 calls" in transcript.notes[0]
    assert any("2 generations nested in another record of the same call" in n for n in transcript.notes)
    assert [f.cause for f in analysis.findings] == [doctor.NONE] * 2
    assert analysis.findings[1].common_prefix_chars > 0
    transcript, _ = _analyse("vercel-aisdk-2025-11-17")
    (round_,) = transcript.rounds
    assert round_.gap is None and round_.tool_names() == ["getWeather"]


def test_a_field_that_is_not_json_is_said_with_where_it_was_read(tmp_path):
    """Fault injection on the real file: one generation's ``input`` string cut at 40 characters. That round says
    its input is not whole JSON, where and how long; the other call is still read."""
    document = json.loads((LANGFUSE / "langgraph-python-2025-08-22.trace.json").read_text())
    generation = next(o for o in document["observations"] if o["type"] == "GENERATION")
    generation["input"] = generation["input"][:40]
    path = tmp_path / "cut.json"
    path.write_text(json.dumps(document))
    transcript = doctor.load_paths([path])
    gaps = [r.gap for r in transcript.rounds if r.gap]
    assert len(transcript.rounds) == 2 and len(gaps) == 1, gaps
    assert "'s input is not whole JSON (40 characters" in gaps[0]


def test_the_public_apis_traces_with_their_observations_embedded(tmp_path):
    """``GET /api/public/traces/{id}`` answers the trace with its observations embedded, and a page of traces
    wraps them in ``data``: each item is read for its observations, never as a request body. Built here from the
    real download above (the same trace and observations under the API's keys), so it reads the same."""
    document = json.loads((LANGFUSE / "csharp-agent-with-gemini-2026-03-09.trace.json").read_text())
    api_trace = {**document["trace"], "observations": document["observations"]}
    download = doctor.load_paths([LANGFUSE / "csharp-agent-with-gemini-2026-03-09.trace.json"])
    for name, shape in (("trace.json", api_trace), ("page.json", {"data": [api_trace], "meta": {"page": 1}})):
        path = tmp_path / name
        path.write_text(json.dumps(shape))
        transcript = doctor.load_paths([path])
        assert transcript.kind == "trace" and "read as a Langfuse export: 3 generations" in transcript.notes[0]
        assert [r.chat for r in transcript.rounds] == [r.chat for r in download.rounds]


def test_a_round_after_a_cut_one_is_compared_with_the_last_whole_round(tmp_path):
    """Fault injection on the real BeeAI file: the second call's input cut (and the span it kept dropped). That
    round is named and gets no verdict; the third is compared with the first (both hold their messages), never
    left uncompared."""
    document = json.loads((LANGFUSE / "beeai-2025-08-01.trace.json").read_text())
    generations = sorted((o for o in document["observations"] if o["type"] == "GENERATION" and o["input"]),
                         key=lambda o: o["startTime"])
    generations[1]["input"], generations[1]["metadata"] = generations[1]["input"][:60], "{}"
    path = tmp_path / "cut.json"
    path.write_text(json.dumps(document))
    analysis = doctor.analyse(doctor.load_paths([path]))
    assert [f.cause for f in analysis.findings][:2] == [doctor.NONE, doctor.NOT_COMPARED]
    third = analysis.findings[2]
    assert third.cause == doctor.NONE and third.compared_with == 1 and third.common_prefix_chars > 0
