"""Langfuse's own exports read as rounds: traces downloaded from the Langfuse UI ("Download JSON": the trace, its
observations, its scores) that langfuse/langfuse keeps as seed data, one per framework integration
(tests/data/README.md says which). The expected rounds below were checked by hand against each file."""

from __future__ import annotations

import json
from pathlib import Path

from core import doctor
from core.doctor import exports

LANGFUSE = Path(__file__).resolve().parents[2] / "data" / "doctor" / "traces" / "langfuse"


def _read(name: str) -> doctor.Transcript:
    transcript = doctor.load_paths([LANGFUSE / f"{name}.json"])
    assert transcript.kind == "trace" and not transcript.errors
    return transcript


def test_langgraph_generations_read_with_the_tools_langfuse_appends_as_tool_messages():
    """LangChain's callback handler records the bound tools as trailing ``role: tool`` messages: they are the
    tool list, not turns; the second call extends the first by the assistant's call and the tool's result."""
    transcript = _read("langgraph-2025-08-22")
    assert "read as a Langfuse export: 2 generations, one round each, from 1 traces (no session ids)" in \
        transcript.notes[0] and "7 other records" in transcript.notes[0]
    first, second = transcript.rounds
    assert [m["content"] for m in first.chat] == ["Be helpful!", "Search the web for 'example' and summarize."]
    assert first.tool_names() == second.tool_names() == ["Web-Search"]
    assert [m["role"] for m in second.chat] == ["user", "user", "assistant", "tool"]
    assert second.chat[2]["tool_calls"][0]["function"] == {"name": "Web-Search", "arguments": '{"query": "example"}'}
    # usageDetails: input 60 / 108 (Langfuse counts the cached tokens apart, here input_cache_read 0)
    assert [(r.measured.prompt_tokens, r.measured.cached_tokens) for r in transcript.rounds if r.measured] == [
        (60, 0), (108, 0)]
    analysis = doctor.analyse(transcript)
    assert [(f.breaks_cache, f.cause) for f in analysis.findings] == [(False, doctor.NONE)] * 2
    assert analysis.findings[1].common_prefix_chars > 0


def test_openai_agents_responses_items_with_the_instructions_and_no_tool_list():
    """OpenAI Agents through OpenTelemetry: the input is Responses items and the instructions sit in
    modelParameters. The second call carries a function call, but the export holds no tool definitions:
    named, no verdict."""
    transcript = _read("openai-agents-2025-09-30")
    first, second = transcript.rounds
    assert first.format == doctor.RESPONSES and first.gap is None
    assert first.chat == [{"role": "system", "content": "You are a helpful agent."},
                          {"role": "user", "content": "What's the weather in Tokyo?"}]
    assert first.measured is not None and (first.measured.prompt_tokens, first.measured.cached_tokens) == (55, 0)
    assert second.gap == "the span records tool calls but not the tool definitions"
    assert any("record no tool definitions" in note for note in transcript.notes)
    analysis = doctor.analyse(transcript)
    assert [f.cause for f in analysis.findings] == [doctor.NONE, doctor.NOT_COMPARED]
    assert analysis.findings[1].verdict is None and not analysis.findings[1].breaks_cache


def test_flattened_text_input_is_named_never_guessed():
    """AutoGen's generation holds the prompt flattened to "role: content" lines: no messages to compare."""
    (round_,) = _read("autogen-2025-06-06").rounds
    assert round_.gap is not None and round_.gap.startswith("the input is text (149 characters")
    assert round_.measured is None


def test_generations_are_grouped_by_session_and_ordered_in_time():
    """pydantic-ai's four generations (two agents, GenAI ``parts`` messages) are listed out of time order in the
    file; the rounds come in time order. Two carry tool calls without the tool list: no verdict for them."""
    document = json.loads((LANGFUSE / "pydantic-ai-tools-2025-12-04.json").read_text())
    listed = [o["startTime"] for o in document["observations"] if o["type"] == "GENERATION"]
    transcript = _read("pydantic-ai-tools-2025-12-04")
    times = [r.time.isoformat() for r in transcript.rounds if r.time]
    assert times == sorted(times) and listed != sorted(listed)
    assert [r.gap is None for r in transcript.rounds] == [True, False, False, True]
    assert transcript.rounds[0].chat[0]["role"] == "system"
    assert transcript.rounds[3].chat[0]["content"].startswith("You are a joke critic.")


def test_a_session_groups_the_traces_of_one_conversation():
    """The koog export given twice, the second copy as another trace of the same session: both traces' rounds
    form one conversation (by session), the first trace's calls before the second's."""
    document = json.loads((LANGFUSE / "koog-2025-08-26.json").read_text())
    other = json.loads(json.dumps(document).replace(document["trace"]["id"], "f" * 32))
    for copy in (document, other):
        copy["trace"]["sessionId"] = "session-1"
    transcript = exports.read_documents(exports.LANGFUSE, [("a", document), ("b", other)])
    assert "from 2 traces in 1 sessions" in transcript.notes[0]
    assert [r.source.split(" ")[0] for r in transcript.rounds] == ["a", "b", "a", "b"]  # same times, a first
