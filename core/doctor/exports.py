"""Observability tools' own exports as rounds: Langfuse's generations and LangSmith's LLM runs, read beside the
OTLP traces of `traces` (one registry, `FAMILIES`; the doctor's input reader calls `read_text` and never asks which).

- **Langfuse**: a trace as the UI's *Download JSON* writes it (``{"trace": ..., "observations": [...]}``), the public
  API's trace with its observations embedded (or a page of them), a list of observations (the table export as JSON
  or JSONL), or an observations page (``{"data": [...]}``). Each ``GENERATION`` is one round; Langfuse stores
  ``input``, ``metadata`` and ``modelParameters`` as JSON strings, decoded by `jsontext` first. Its ``input`` is
  whatever the integration recorded: chat messages (OpenAI, LangChain, whose tool definitions Langfuse appends as
  ``role: tool`` messages), GenAI semconv messages of ``parts`` (OpenTelemetry instrumentations), Responses items
  (OpenAI Agents, with ``modelParameters.instructions``), a Gemini request. Anything else (text, an SDK object's
  repr) is named and gets no verdict. A generation Langfuse took in over OpenTelemetry keeps the span's attributes
  in ``metadata.attributes``: where they hold the prompt (with the messages Langfuse moved to ``input``) they are
  read as `traces` reads a span (tool definitions, a conversation id included), else the input is.
  ``usageDetails``: Langfuse counts ``input`` without the cached and cache-written tokens (their own ``input_*``
  keys), so the prompt is their sum. Generations nested in one another are one call (`calls`); those with no
  input (lifecycle records) are left out, and said.
- **LangSmith**: runs as ``Client.list_runs`` returns them (a JSON list, ``{"runs": [...]}``, or one per line). Each
  ``run_type: llm`` run is one round: ``inputs.messages`` (chat dicts, or LangChain's serialized messages),
  ``extra.invocation_params`` (model, tools), usage from ``outputs`` (``usage_metadata`` with
  ``input_token_details.cache_read``) or the run's own ``prompt_tokens``/``prompt_token_details``.

Conversations: Langfuse's session, else the trace; LangSmith's thread (``thread_id``, ``session_id`` or
``conversation_id`` in the run's metadata: LangSmith's own ``session_id`` is the project), else the trace.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from core import words
from core.backends.usage import count
from core.doctor import calls, jsontext, spans, traces
from core.doctor.formats import read_body
from core.doctor.model import Measured, Round, Transcript
from core.words import Sentence

LANGFUSE, LANGSMITH = "Langfuse", "LangSmith"
LANGFUSE_CACHED = ("input_cache_read", "input_cached_tokens", "cache_read_input_tokens")  # Langfuse's normalized keys
LANGCHAIN_ROLES = {"human": "user", "ai": "assistant", "system": "system", "tool": "tool", "function": "function",
                   "HumanMessage": "user", "AIMessage": "assistant", "SystemMessage": "system",
                   "ToolMessage": "tool", "AIMessageChunk": "assistant", "FunctionMessage": "function"}
NO_INPUT = "the export records no input for this call"
THREAD_KEYS = ("thread_id", "session_id", "conversation_id")  # LangSmith's documented thread metadata keys


@dataclass
class Record:
    """One LLM call of an export: where it is, its conversation, when it began, and the call itself."""

    where: str
    conversation: str
    trace: str
    start: datetime | None
    data: Mapping[str, Any]
    key: str = ""  # the record's own id, and the id of the record it sits in (`calls.one_per_call`)
    parent: str | None = None


def _optional(value: Any) -> str | None:
    return None if value is None else str(value)


def _map(value: Any) -> Mapping[str, Any]:
    """A JSON object, or an empty one where the record holds something else."""
    return value if isinstance(value, Mapping) else {}


@dataclass
class Call:
    """What one record holds of an LLM call: the request's model, messages and parameters, and the usage."""

    record: Record
    model: Any
    messages: Any
    parameters: Mapping[str, Any]
    measured: Measured | None
    span: Mapping[str, Any] | None = None  # the OpenTelemetry span's attributes, where the record keeps them
    problem: str | None = None  # a field that should hold JSON and does not (`jsontext`), in words


def _when(value: Any) -> datetime | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        moment = datetime.fromisoformat(value.replace("Z", "+00:00").replace(" ", "T"))
    except ValueError:
        return None
    return moment if moment.tzinfo else moment.replace(tzinfo=timezone.utc)


def _dumps(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def _chat_message(message: Mapping[str, Any]) -> dict[str, Any]:
    """A chat message as an integration recorded it, in the Chat Completions shape: LangChain keeps tool calls
    in ``additional_kwargs`` (or ``tool_calls`` with ``args``); Langfuse parses arguments into objects."""
    role = LANGCHAIN_ROLES.get(str(message.get("role") or message.get("type")), message.get("role") or "user")
    out: dict[str, Any] = {"role": role, "content": message.get("content") if message.get("content") is not None
                           else ""}
    if not isinstance(out["content"], (str, list)):
        out["content"] = _dumps(out["content"])
    extra = _map(message.get("additional_kwargs"))
    calls = message.get("tool_calls") or extra.get("tool_calls")
    if calls:
        out["tool_calls"] = [{"id": c.get("id"), "type": "function", "function": {
            "name": (c.get("function") or {}).get("name", c.get("name")),
            "arguments": _dumps((c.get("function") or {}).get("arguments", c.get("args", "")))}} for c in calls]
    for key in ("tool_call_id", "name"):
        if message.get(key):
            out[key] = message[key]
    return out


def _definition(message: Any) -> bool:
    """Langfuse's LangChain integration appends the tool definitions as ``role: tool`` messages."""
    content = message.get("content") if isinstance(message, Mapping) else None
    return (message.get("role") == "tool" and not message.get("tool_call_id") and isinstance(content, Mapping)
            and content.get("type") == "function" and "function" in content)


def _gemini(model: Any, body: Mapping[str, Any]) -> dict[str, Any]:
    """A Gemini request as an SDK recorded it: Google's GenAI SDK (and ADK) keep the system instruction and the
    tools in ``config``."""
    config = _map(body.get("config"))
    lifted = {"systemInstruction": config.get("system_instruction") or config.get("systemInstruction"),
              "tools": config.get("tools")}
    return {"model": model, **{k: v for k, v in lifted.items() if v}, **body}


def _not_messages(messages: Any) -> str:
    """Why an input is not a list of messages, saying what it is."""
    if isinstance(messages, str):
        return (f"the input is text ({len(messages):,} characters, it starts {messages[:32]!r}), not a list of "
                "messages: nothing to compare")
    if isinstance(messages, Mapping):
        return (f"the input is a JSON object with {', '.join(map(str, list(messages)[:5]))}, not a list of "
                "messages: this integration's shape is not read")
    if isinstance(messages, list) and messages and isinstance(messages[0], str):
        return (f"the input's messages are text ({messages[0][:32]!r}: an SDK object written as a string), not "
                "JSON messages: nothing to compare")
    return (f"the input is not a list of messages (a JSON {type(messages).__name__}): this integration's shape is "
            "not read")


def _body(model: Any, messages: Any, parameters: Mapping[str, Any]) -> dict[str, Any]:
    """A request body from a recorded input, in the format its messages show; `traces.Gap` where it holds none."""
    if isinstance(messages, Mapping) and isinstance(messages.get("contents"), list):
        return _gemini(model, messages)
    if isinstance(messages, Mapping) and isinstance(messages.get("messages"), list):
        messages = messages["messages"]
    elif isinstance(messages, Mapping) and "role" in messages and "content" in messages:
        messages = [messages]  # one message alone (the Claude Agent SDK's turn)
    if messages is None:
        raise traces.Gap(NO_INPUT)
    if not isinstance(messages, list) or not messages or not all(isinstance(m, Mapping) for m in messages):
        raise traces.Gap(_not_messages(messages))
    if isinstance(parameters.get("instructions"), str) or any(
            m.get("type") in ("function_call", "function_call_output", "reasoning", "message") for m in messages):
        return {"model": model, "input": messages, **({"instructions": parameters["instructions"]}
                                                      if isinstance(parameters.get("instructions"), str) else {})}
    if any("parts" in m for m in messages):
        chat = [traces.genai_message(m, "input") for m in messages]
        return {"model": model, "messages": chat}
    tools = [m["content"] for m in messages if _definition(m)]
    chat = [_chat_message(m) for m in messages if not _definition(m)]
    return {"model": model, "messages": chat, **({"tools": tools} if tools else {})}


def _record_round(call: Call) -> Round:
    """One LLM call as a round; what the record lacks becomes `Round.gap` (kept, no verdict), as for a span."""
    record, model, parameters = call.record, call.model, call.parameters
    kind = traces.family(call.span) if call.span else None
    if call.span and kind:  # an OpenTelemetry span kept whole: read as the OTLP reader reads it, else the input
        start = int(record.start.timestamp() * 1e9) if record.start else 0
        span = dict(call.span)
        if kind == traces.GENAI and "gen_ai.input.messages" not in span and isinstance(call.messages, list) \
                and any(isinstance(m, Mapping) and "parts" in m for m in call.messages):
            span["gen_ai.input.messages"] = call.messages  # Langfuse moves them from the span to ``input``
        spanned = traces.span_round(spans.Span(record.trace, "", start, "", span, record.where), kind)
        if spanned.gap is None:
            spanned.measured = call.measured or spanned.measured
            return spanned
    gap = None
    try:
        if call.problem:
            raise traces.Gap(call.problem)
        body = _body(model, call.messages, parameters)
        tools = parameters.get("tools") if isinstance(parameters.get("tools"), list) else traces.span_tools(
            call.span or {})
        if tools and "tools" not in body and "messages" in body:
            body["tools"] = tools
        round_ = read_body(body, record.where)
        traces.check_round(round_)
    except (traces.Gap, ValueError) as exc:
        gap = traces.gap_of(exc, record.where)
        round_ = traces.gap_round(model, record.where)
    round_.time, round_.gap = record.start, gap
    traces.history_elsewhere(round_)
    round_.endpoint = traces.span_endpoint(call.span or {})
    round_.measured = None if gap else call.measured
    return round_


# --- Langfuse -----------------------------------------------------------------------------------------------


def _embedded(trace: Mapping[str, Any], observations: list[Any]) -> list[Mapping[str, Any]]:
    session = trace.get("sessionId")
    return [{**o, "sessionId": o.get("sessionId") or session} for o in observations if isinstance(o, Mapping)]


def _api_traces(document: Any) -> list[Mapping[str, Any]] | None:
    """The public API's traces (``GET /api/public/traces/{id}``, or a page of them): each trace with its
    observations embedded as objects."""
    items = document.get("data") if isinstance(document, Mapping) and "data" in document else [document]
    if not isinstance(items, list) or not items or not all(
            isinstance(t, Mapping) and isinstance(t.get("observations"), list) and "id" in t
            and all(isinstance(o, Mapping) for o in t["observations"]) for t in items):
        return None
    return [o for t in items for o in _embedded(t, t["observations"])]


def _langfuse_observations(document: Any) -> list[Mapping[str, Any]] | None:
    if isinstance(document, Mapping):
        if isinstance(document.get("trace"), Mapping) and isinstance(document.get("observations"), list):
            return _embedded(document["trace"], document["observations"])
        embedded = _api_traces(document)
        if embedded is not None:
            return embedded
        document = document.get("data")
    if isinstance(document, list) and document and all(
            isinstance(o, Mapping) and "traceId" in o and "startTime" in o and "type" in o for o in document):
        return list(document)
    return None


def _langfuse_usage(usage: Any) -> Measured | None:
    if not isinstance(usage, Mapping):
        return None
    cached_key = next((k for k in LANGFUSE_CACHED if k in usage), None)
    raw = "prompt_details.cache_read" in usage  # an OTel span's key kept as sent: `input` may include it
    cached = count(usage.get(cached_key)) if cached_key else count(usage.get("prompt_details.cache_read"))
    uncached = count(usage.get("input"))
    if cached is None:
        return None
    parts = [count(v) for k, v in usage.items() if k.startswith("input_") and k != "input_audio"]
    if uncached is None or None in parts:
        return Measured(None, cached, cached_key or "prompt_details.cache_read")
    if raw and not cached_key:
        return Measured(uncached if cached == 0 else None, cached, "prompt_details.cache_read")
    return Measured(uncached + sum(p for p in parts if p is not None), cached, cached_key or "")


def _decoded(observation: Mapping[str, Any], where: str) -> tuple[Mapping[str, Any], list[str]]:
    """An observation with the fields Langfuse stores as JSON strings decoded (`jsontext`), and a sentence for
    each that should be JSON and is not (the field is then kept as text)."""
    out, problems = dict(observation), []
    for key in ("input", "metadata", "modelParameters"):
        out[key], problem = jsontext.lenient(observation.get(key), f"{where}'s {key}")
        problems += [problem] if problem else []
    attributes, problem = jsontext.lenient(_map(out["metadata"]).get("attributes"), f"{where}'s metadata.attributes")
    if isinstance(out["metadata"], Mapping) and attributes is not None:
        out["metadata"] = {**out["metadata"], "attributes": attributes}
    return out, problems + ([problem] if problem else [])


def _langfuse_call(where: str, observation: Mapping[str, Any]) -> Call | None:
    if observation.get("type") != "GENERATION":
        return None
    here = f"{where} generation {str(observation.get('id'))[:16]}"
    observation, problems = _decoded(observation, here)
    trace = str(observation.get("traceId"))
    span = _map(_map(observation.get("metadata")).get("attributes"))  # what Langfuse kept of an OTel span
    session = observation.get("sessionId") or next((span[k] for k in traces.SESSION_KEYS if span.get(k)), None)
    record = Record(here, str(session or trace), trace, _when(observation.get("startTime")), observation,
                    str(observation.get("id") or ""), _optional(observation.get("parentObservationId")))
    return Call(record, observation.get("model"), observation.get("input"), _map(observation.get("modelParameters")),
                _langfuse_usage(observation.get("usageDetails")), span or None, "; ".join(problems) or None)


# --- LangSmith ----------------------------------------------------------------------------------------------


def _langsmith_runs(document: Any) -> list[Mapping[str, Any]] | None:
    if isinstance(document, Mapping):
        document = document.get("runs") if isinstance(document.get("runs"), list) else [document]
    if isinstance(document, list) and document and all(
            isinstance(r, Mapping) and "run_type" in r and "trace_id" in r for r in document):
        return list(document)
    return None


def _langchain_messages(inputs: Any) -> Any:
    """``inputs.messages`` as recorded: chat dicts, LangChain's serialized messages (``lc`` constructors, nested
    one list per prompt), or ``{"type": ..., "data": ...}`` dicts."""
    messages = inputs.get("messages") if isinstance(inputs, Mapping) else None
    if isinstance(messages, list) and len(messages) == 1 and isinstance(messages[0], list):
        messages = messages[0]  # a chat model's batch of one prompt
    if not isinstance(messages, list):
        prompts = inputs.get("prompts") if isinstance(inputs, Mapping) else None
        return prompts[0] if isinstance(prompts, list) and len(prompts) == 1 else messages
    out = []
    for message in messages:
        if isinstance(message, Mapping) and message.get("lc") == 1 and isinstance(message.get("kwargs"), Mapping):
            kind = (message.get("id") or ["HumanMessage"])[-1]
            message = {**message["kwargs"], "type": kind}
        elif isinstance(message, Mapping) and isinstance(message.get("data"), Mapping) and "type" in message:
            message = {**message["data"], "type": message["type"]}
        out.append(message)
    return out


def _langsmith_usage(run: Mapping[str, Any]) -> Measured | None:
    outputs = _map(run.get("outputs"))
    usage = outputs.get("usage_metadata")
    if not isinstance(usage, Mapping):
        generations = outputs.get("generations")
        first = generations[0] if isinstance(generations, list) and generations else None
        first = first[0] if isinstance(first, list) and first else first
        message = first.get("message") if isinstance(first, Mapping) else None
        kwargs = message.get("kwargs", message) if isinstance(message, Mapping) else None
        usage = kwargs.get("usage_metadata") if isinstance(kwargs, Mapping) else None
    if isinstance(usage, Mapping):
        details = usage.get("input_token_details")
        cached = count(details.get("cache_read")) if isinstance(details, Mapping) else None
        return None if cached is None else Measured(count(usage.get("input_tokens")), cached, "cache_read")
    details = run.get("prompt_token_details")
    cached = count(details.get("cache_read")) if isinstance(details, Mapping) else None
    return None if cached is None else Measured(count(run.get("prompt_tokens")), cached, "cache_read")


def _langsmith_call(where: str, run: Mapping[str, Any]) -> Call | None:
    if run.get("run_type") != "llm":
        return None
    extra = _map(run.get("extra"))
    metadata, parameters = _map(extra.get("metadata")), _map(extra.get("invocation_params"))
    trace = str(run.get("trace_id"))
    thread = next((str(metadata[k]) for k in THREAD_KEYS if metadata.get(k)), None)
    record = Record(f"{where} run {str(run.get('id'))[:16]}", thread or trace, trace, _when(run.get("start_time")), run,
                    str(run.get("id") or ""), _optional(run.get("parent_run_id")))
    inputs = _map(run.get("inputs"))
    model = (parameters.get("model") or parameters.get("model_name") or inputs.get("model")
             or metadata.get("ls_model_name"))
    if "tools" not in parameters and isinstance(inputs.get("tools"), list):
        parameters = {**parameters, "tools": inputs["tools"]}
    return Call(record, model, _langchain_messages(inputs), parameters, _langsmith_usage(run))


# --- the registry -------------------------------------------------------------------------------------------

@dataclass
class Family:
    """One export format: its records in a document (None: not this format), one record as an LLM call (None:
    another kind of record), and what its LLM calls are called."""

    records: Callable[[Any], list[Mapping[str, Any]] | None]
    call: Callable[[str, Mapping[str, Any]], Call | None]
    unit: Sentence


FAMILIES = {LANGFUSE: Family(_langfuse_observations, _langfuse_call, Sentence("doctor_notes.unit.generations")),
            LANGSMITH: Family(_langsmith_runs, _langsmith_call, Sentence("doctor_notes.unit.llm_runs"))}


def read_documents(name: str, documents: list[tuple[str, Any]]) -> Transcript:
    """Every LLM call of one family's documents as a round, conversations in the order they began."""
    family, found, others, lifecycle = FAMILIES[name], [], 0, 0
    for where, document in documents:
        for item in family.records(document) or []:
            call = family.call(where, item)
            round_ = _record_round(call) if call is not None else None
            if call is None or round_ is None:
                others += 1
            elif round_.gap == NO_INPUT:
                lifecycle += 1
            else:
                found.append((call.record, round_))
    unit, total = family.unit, len(found)
    nodes, merged = calls.one_per_call([calls.Node(record.key, record.parent, round_) for record, round_ in found],
                                       unit)
    records = {id(record_round): record for record, record_round in found}
    found = [(records[id(node.round)], node.round) for node in nodes]
    ordered = [r for _, r in traces.in_conversations(found, lambda f: f[0].conversation,
                                                       lambda f: f[0].start.timestamp() if f[0].start else 0.0)]
    conversations = {record.conversation for record, _ in found}
    trace_ids = {record.trace for record, _ in found}
    named = len(conversations - trace_ids)
    notes: list[str] = [Sentence("doctor_notes.read_export", name=name,
                                 counted=traces.counted(total, unit, len(ordered)),
                                 traces=words.counted("doctor_notes.traces", len(trace_ids)),
                                 sessions=traces.in_sessions(named),
                                 others=words.counted("doctor_notes.other_records", others))]
    notes += merged
    if lifecycle:
        notes.append(words.counted("doctor_notes.lifecycle", lifecycle, unit=words.counted(unit.key, lifecycle)))
    notes += traces.tool_notes(ordered, unit) + traces.history_notes(ordered)
    notes += traces.gaps_note(ordered, unit)
    return Transcript(ordered, [], "trace", notes)


def read_text(text: str, name: str) -> Transcript | None:
    """Spans in any layout (`traces.read_found`), a Langfuse or a LangSmith export, else None (a request log).
    The file is split into its JSON documents once (`spans.documents`), whichever reads it."""
    if text.lstrip()[:1] not in ("{", "[") and not any(
            line.lstrip()[:1] in ("{", "[") for line in text.split("\n", spans.BANNER_LINES + 1)[:spans.BANNER_LINES]):
        refused = traces.console_lines(text, name)
        if refused:
            raise traces.TraceError(refused)
        return None
    found, problem = spans.documents(text, name)
    read = traces.read_found(found, problem)
    if read is not None or problem or not found or text.lstrip()[:1] not in ("{", "["):
        return read
    documents = found
    if len(documents) > 1:  # one record per line: the lines together are the export
        documents = [(name, [d for _, d in documents])] if all(isinstance(d, Mapping) for _, d in documents) \
            else documents
    for family_name, family in FAMILIES.items():
        if documents and all(family.records(d) is not None for _, d in documents):
            return read_documents(family_name, documents)
    return None
