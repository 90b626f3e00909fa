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
    assert "read as a Langfuse export: 2 generations, one round each, from 1 trace (no session ids)" in \
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


def test_openai_agents_read_from_the_span_attributes_langfuse_kept():
    """OpenAI Agents through OpenInference: Langfuse's ``input`` holds Responses items without the tool list, but
    the observation keeps the span's attributes (``metadata.attributes``: ``llm.input_messages.*``,
    ``llm.tools.0.tool.json_schema``, ``llm.token_count.prompt_details.cache_read``), read as a span is."""
    transcript = _read("openai-agents-2025-09-30")
    first, second = transcript.rounds
    assert first.gap is None and second.gap is None
    assert first.chat == [{"role": "system", "content": "You are a helpful agent."},
                          {"role": "user", "content": "What's the weather in Tokyo?"}]
    assert first.tool_names() == second.tool_names() == ["get_weather"]
    assert [m["role"] for m in second.chat] == ["system", "user", "assistant", "tool"]
    assert [(r.measured.prompt_tokens, r.measured.cached_tokens) for r in transcript.rounds if r.measured] == [
        (55, 0), (85, 0)]
    analysis = doctor.analyse(transcript)
    assert [(f.breaks_cache, f.cause) for f in analysis.findings] == [(False, doctor.NONE)] * 2


def test_flattened_text_input_is_named_never_guessed():
    """AutoGen's generation holds the prompt flattened to "role: content" lines: no messages to compare."""
    (round_,) = _read("autogen-2025-06-06").rounds
    assert round_.gap is not None and round_.gap.startswith("the input is text (149 characters")
    assert round_.measured is None


def test_generations_are_grouped_by_session_and_ordered_in_time():
    """pydantic-ai's four generations (two agents, GenAI ``parts`` messages) are listed out of time order in the
    file; the rounds come in time order. The tool lists are in the kept span's ``model_request_parameters``
    (pydantic-ai's ``function_tools`` and ``output_tools``): every round is read whole, with its tools."""
    document = json.loads((LANGFUSE / "pydantic-ai-tools-2025-12-04.json").read_text())
    listed = [o["startTime"] for o in document["observations"] if o["type"] == "GENERATION"]
    transcript = _read("pydantic-ai-tools-2025-12-04")
    times = [r.time.isoformat() for r in transcript.rounds if r.time]
    assert times == sorted(times) and listed != sorted(listed)
    assert [r.gap is None for r in transcript.rounds] == [True] * 4
    assert transcript.rounds[1].tool_names()[:2] == ["get_pun_suggestion", "get_dad_joke_suggestion"]
    assert transcript.rounds[3].tool_names() == ["final_result"]
    assert transcript.rounds[0].chat[0]["role"] == "system"
    assert transcript.rounds[3].chat[0]["content"].startswith("You are a joke critic.")


def test_a_conversation_id_in_the_kept_span_is_the_session():
    """Koog writes ``gen_ai.conversation.id`` on its spans; the trace has no sessionId: the id groups them."""
    transcript = _read("koog-2025-08-26")
    assert "from 1 trace in 1 session," in transcript.notes[0]
    assert [len(r.chat) for r in transcript.rounds] == [2, 6]


def test_a_session_groups_the_traces_of_one_conversation():
    """The koog export given twice, the second copy as another trace of the same session: both traces' rounds
    form one conversation (by session), the first trace's calls before the second's."""
    document = json.loads((LANGFUSE / "koog-2025-08-26.json").read_text())
    other = json.loads(json.dumps(document).replace(document["trace"]["id"], "f" * 32))
    for copy in (document, other):
        copy["trace"]["sessionId"] = "session-1"
    transcript = exports.read_documents(exports.LANGFUSE, [("a", document), ("b", other)])
    assert "from 2 traces in 1 session," in transcript.notes[0]
    assert [r.source.split(" ")[0] for r in transcript.rounds] == ["a", "b", "a", "b"]  # same times, a first


def test_the_observations_table_exported_as_jsonl_reads_the_same(tmp_path):
    """The table export writes one observation per line: the LangGraph trace's observations so written read as
    the download does (no session: the trace groups them)."""
    document = json.loads((LANGFUSE / "langgraph-2025-08-22.json").read_text())
    path = tmp_path / "observations.jsonl"
    path.write_text("".join(json.dumps(o) + "\n" for o in document["observations"]))
    lines, download = doctor.load_paths([path]), _read("langgraph-2025-08-22")
    assert [r.chat for r in lines.rounds] == [r.chat for r in download.rounds]
    assert [r.tool_names() for r in lines.rounds] == [["Web-Search"]] * 2


def test_cached_tokens_are_added_back_to_langfuse_input():
    """Langfuse stores ``input`` without the cache reads and writes (OtelIngestionProcessor.ts subtracts them):
    the prompt is their sum. The numbers are the Anthropic usage quoted in that file's comment (7 uncached,
    2,089 written, 16,399 read), stored as Langfuse's normalisation stores them; constructed, not exported."""
    measured = exports._langfuse_usage({"input": 7, "input_cached_tokens": 16399, "input_cache_creation": 2089,
                                        "output": 445, "total": 18940})
    assert measured is not None and (measured.prompt_tokens, measured.cached_tokens) == (18495, 16399)
    raw = exports._langfuse_usage({"input": 900, "prompt_details.cache_read": 512})  # a span's key, kept as sent
    assert raw is not None and (raw.prompt_tokens, raw.cached_tokens) == (None, 512)  # input may hold it or not
