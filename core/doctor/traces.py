"""Traces as rounds: the spans an observability tool exported, read beside the request logs.

Each LLM span is one round, read from the attributes its instrumentation wrote:

- OpenTelemetry GenAI semantic conventions: ``gen_ai.system_instructions``, ``gen_ai.input.messages``
  (messages of typed parts), ``gen_ai.tool.definitions``, ``gen_ai.request.model``, ``gen_ai.usage.input_tokens``
  and ``gen_ai.usage.cache_read.input_tokens``; and the older flat ``gen_ai.prompt.{i}.*`` attributes with
  ``llm.request.functions.{i}.*`` that OpenLLMetry writes.
- OpenInference (Arize Phoenix, the openinference instrumentations): ``llm.input_messages.{i}.message.*``,
  ``llm.tools.{i}.tool.json_schema``, ``llm.invocation_parameters``, ``llm.token_count.prompt`` and
  ``llm.token_count.prompt_details.cache_read``.

The documents: OTLP JSON, as the collector's file exporter writes it (one ``resourceSpans`` export per line), as
Jaeger's and Tempo's exports do (one document; Tempo's ``batches``). Rounds are grouped into
conversations (session, else trace) and ordered in time within each. A round is rebuilt as a Chat Completions
body and read by `formats.chat_round`, so the analysis, the CLI and the page treat it like a logged request.

What a span does not hold is named per round and the round gets no verdict (`Round.gap`): content cut at an
exporter's length limit, redacted or not captured, tool calls without the tool definitions, a provider-side
tool whose results never reach the span.
"""

from __future__ import annotations

import base64
import functools
import json
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, TypeVar

from core.backends.usage import count
from core.doctor.formats import chat_round
from core.doctor.model import Block, Measured, Round, Transcript, json_problem

GENAI, OPENLLMETRY, OPENINFERENCE = "OpenTelemetry GenAI", "OpenLLMetry (gen_ai.prompt.*)", "OpenInference"
SESSION_KEYS = ("session.id", "gen_ai.conversation.id", "langfuse.session.id",
                "traceloop.association.properties.session_id")
REDACTED = ("__REDACTED__", "<redacted>", "[REDACTED]", "[redacted]")
TRUNCATION_MARKS = ("...[truncated]", "[TRUNCATED]", "…[truncated]", "... (truncated)")
# OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT and the instrumentations' own limits are set in these sizes: a text exactly
# this long was most likely cut there
CUT_LENGTHS = frozenset(2 ** n for n in range(10, 21)) | frozenset({1000, 2000, 4000, 5000, 8000, 10000, 12000, 16000,
                                                                    32000, 64000, 100000})
T = TypeVar("T")
FUNCTION_TOOL = ("function", "custom", None)
TOOL_FIELDS = ("tool_calls", "tool_call_id", "function_call", "tool_use", "tool_result")  # `Block.field`s of calls


class TraceError(ValueError):
    """The document is a trace, but cannot be read; the message says why."""


@dataclass
class Span:
    """One span, whatever the document: ids, start (ns since the epoch), name and flat attributes."""

    trace_id: str
    span_id: str
    start_ns: int
    name: str
    attributes: dict[str, Any] = field(default_factory=dict)
    where: str = ""


def _hex(value: Any) -> str:
    """An OTLP JSON id: hex as the spec writes it, or base64 as protobuf's own JSON mapping writes it."""
    text = str(value or "")
    if re.fullmatch(r"[0-9a-fA-F]*", text):
        return text.lower()
    try:
        return base64.b64decode(text).hex()
    except ValueError:
        return text


def _otlp_value(value: Any) -> Any:
    """An OTLP ``AnyValue`` as Python: strings, ints (JSON writes 64-bit ints as strings), arrays, maps."""
    if not isinstance(value, Mapping):
        return value
    for key in ("stringValue", "boolValue", "doubleValue"):
        if key in value:
            return value[key]
    if "intValue" in value:
        try:
            return int(value["intValue"])
        except (TypeError, ValueError):  # "lots": kept as sent, and named where it is read as a count
            return value["intValue"]
    if "arrayValue" in value:
        return [_otlp_value(v) for v in (value["arrayValue"] or {}).get("values", [])]
    if "kvlistValue" in value:
        return {kv.get("key"): _otlp_value(kv.get("value")) for kv in (value["kvlistValue"] or {}).get("values", [])}
    if "bytesValue" in value:
        return value["bytesValue"]
    return None


def _otlp_spans(document: Mapping[str, Any], where: str) -> Iterator[Span]:
    for batch in document.get("resourceSpans") or document.get("batches") or []:
        resource = {a.get("key"): _otlp_value(a.get("value"))
                    for a in (batch.get("resource") or {}).get("attributes", [])}
        for scope in batch.get("scopeSpans") or batch.get("instrumentationLibrarySpans") or []:
            for span in scope.get("spans") or []:
                attributes = {**resource, **{a.get("key"): _otlp_value(a.get("value"))
                                             for a in span.get("attributes") or []}}
                span_id = _hex(span.get("spanId"))
                yield Span(_hex(span.get("traceId")), span_id, int(span.get("startTimeUnixNano") or 0),
                           str(span.get("name", "")), attributes, f"{where} span {span_id[:16]}")


def is_trace(document: Any) -> bool:
    """Whether a JSON document is a trace export this module reads (never a request body or log wrapper)."""
    if not isinstance(document, Mapping):
        return False
    return isinstance(document.get("resourceSpans"), list) or isinstance(document.get("batches"), list)


def family(attributes: Mapping[str, Any]) -> str | None:
    """Which conventions an LLM span follows, or None for a span that is not an LLM call."""
    if attributes.get("openinference.span.kind") == "LLM" or any(k.startswith("llm.input_messages.")
                                                                  for k in attributes):
        return OPENINFERENCE
    if any(k in attributes for k in ("gen_ai.input.messages", "gen_ai.system_instructions")):
        return GENAI
    if any(k.startswith("gen_ai.prompt.") for k in attributes):
        return OPENLLMETRY
    operation = attributes.get("gen_ai.operation.name")
    if operation in ("chat", "text_completion", "generate_content") or "gen_ai.request.model" in attributes:
        return GENAI  # an LLM span without its content: named, never compared
    return None


@functools.lru_cache(maxsize=4096)
def _loads(text: str) -> Any:
    """JSON attributes repeat on every span of an agent (its tools, its parameters): parsed once. The rounds
    share the parsed objects, which nothing changes."""
    return json.loads(text)


_TEXTS: dict[int, tuple[Any, str]] = {}


def _tool_text(tool: Any) -> str:
    """A tool's text as `formats.chat_round` writes it (its JSON), written once per parsed tool: the spans of an
    agent share their tools' parsed objects (`_loads`), and each entry holds its object, so an id is never
    reused while it is kept."""
    entry = _TEXTS.get(id(tool))
    if entry is None or entry[0] is not tool:
        if len(_TEXTS) > 4096:
            _TEXTS.clear()
        entry = _TEXTS[id(tool)] = (tool, json.dumps(tool, ensure_ascii=False))
    return entry[1]


@functools.lru_cache(maxsize=1024)
def _genai_tools(text: str) -> list[Any] | None:
    tools = _loads(text)
    return [_chat_tool(t) for t in tools] if isinstance(tools, list) else None


class Gap(Exception):
    """What a span does not hold, in words; the round is kept with no verdict."""


def _json(attributes: Mapping[str, Any], key: str, default: Any = None) -> Any:
    """A JSON attribute; one that does not parse was cut (`Gap`)."""
    value = attributes.get(key)
    if value is None or not isinstance(value, str):
        return default if value is None else value
    _check_text(key, value)
    if not value.lstrip().startswith(("[", "{")):  # plain text where JSON was specified (LiteLLM's instructions)
        return value
    try:
        return _loads(value)
    except RecursionError:
        raise Gap(f"{key} is JSON nested too deeply to read (deeper than Python's recursion limit)") from None
    except json.JSONDecodeError:
        raise Gap(f"{key} is not whole JSON ({len(value):,} characters, it ends {value[-24:]!r}): the exporter cut it "
                  "at its length limit") from None


def _check_text(key: str, value: str) -> None:
    if value.strip() in REDACTED:
        raise Gap(f"{key} is redacted ({value.strip()})")
    if value.endswith(TRUNCATION_MARKS):
        raise Gap(f"{key} ends with a truncation mark: the exporter cut it")
    if len(value) in CUT_LENGTHS:
        raise Gap(f"the exporter cut {key} at {len(value):,} characters")


def _indexed(attributes: Mapping[str, Any], prefix: str) -> list[dict[str, Any]]:
    """``prefix.{i}.rest`` attributes as a list (by i) of dicts of ``rest``."""
    items: dict[int, dict[str, Any]] = {}
    start = prefix + "."
    for key, value in attributes.items():
        if key.startswith(start):
            number, _, rest = key[len(start):].partition(".")
            if number.isdigit() and rest:
                items.setdefault(int(number), {})[rest] = value
    return [items[i] for i in sorted(items)]


def _text(key: str, value: Any) -> str:
    if isinstance(value, str):
        _check_text(key, value)
        return value
    return json.dumps(value, ensure_ascii=False)


def _objects(value: Any, key: str, what: str) -> list[Mapping[str, Any]]:
    """``value`` as a list of JSON objects, else a `Gap` naming the attribute (a hostile or broken exporter)."""
    if not isinstance(value, list) or not all(isinstance(item, Mapping) for item in value):
        shown = type(value).__name__ if isinstance(value, list | Mapping) else repr(value)[:40]
        raise Gap(f"{key} is not a list of {what} (it holds {shown}): this span cannot be read")
    return value


def genai_message(message: Mapping[str, Any], key: str) -> dict[str, Any]:
    """A GenAI semconv message (``role``, ``parts``) as a Chat Completions message."""
    out: dict[str, Any] = {"role": message.get("role", "user")}
    texts, calls = [], []
    for part in _objects(message.get("parts") or [], key, "message parts"):
        kind = part.get("type")
        if kind == "text":
            texts.append(_text(key, part.get("content", "")))
        elif kind == "tool_call":
            calls.append({"id": part.get("id"), "type": "function", "function": {
                "name": part.get("name"), "arguments": json.dumps(part.get("arguments"), ensure_ascii=False)}})
        elif kind == "tool_call_response":
            out["tool_call_id"] = part.get("id")
            texts.append(_text(key, part.get("response", part.get("result", ""))))  # pydantic-ai: result
        elif kind == "reasoning":
            out["reasoning_content"] = _text(key, part.get("content", ""))
        else:
            texts.append(json.dumps(part, ensure_ascii=False, sort_keys=True))
    out["content"] = "".join(texts)
    if calls:
        out["tool_calls"] = calls
    return out


def _chat_tool(tool: Any) -> Any:
    """A GenAI tool definition (flat: ``type``, ``name``, ``description``, ``parameters``) in the Chat Completions
    shape the other conventions record, so the same tool reads the same from every instrumentation."""
    if isinstance(tool, Mapping) and tool.get("type") == "function" and "function" not in tool:
        return {"type": "function", "function": {k: v for k, v in tool.items() if k != "type"}}
    return tool


def _genai(attributes: Mapping[str, Any]) -> tuple[list[dict[str, Any]], list[Any] | None]:
    system = _json(attributes, "gen_ai.system_instructions")
    messages = [genai_message(m, "gen_ai.input.messages")
                for m in _objects(_json(attributes, "gen_ai.input.messages", []), "gen_ai.input.messages", "messages")]
    if system:
        parts = _objects(system, "gen_ai.system_instructions", "message parts") if not isinstance(system, str) \
            else [{"type": "text", "content": system}]
        messages.insert(0, genai_message({"role": "system", "parts": parts}, "gen_ai.system_instructions"))
    definitions = attributes.get("gen_ai.tool.definitions")
    if definitions is None and "llm.request.functions.0.name" in attributes:  # LiteLLM: OpenLLMetry's tool keys
        return messages, _openllmetry(attributes)[1]
    if isinstance(definitions, str):
        _json(attributes, "gen_ai.tool.definitions")  # a cut or redacted list is a `Gap`
        return messages, _genai_tools(definitions)
    return messages, [_chat_tool(t) for t in definitions] if isinstance(definitions, list) else None


def _openllmetry(attributes: Mapping[str, Any]) -> tuple[list[dict[str, Any]], list[Any] | None]:
    messages = []
    for item in _indexed(attributes, "gen_ai.prompt"):
        message: dict[str, Any] = {"role": item.get("role", "user"),
                                   "content": _text("gen_ai.prompt", item.get("content", ""))}
        calls = _indexed(item, "tool_calls")
        if calls:
            message["tool_calls"] = [{"id": c.get("id"), "type": "function", "function": {
                "name": c.get("name"), "arguments": c.get("arguments", "")}} for c in calls]
        if item.get("tool_call_id"):
            message["tool_call_id"] = item["tool_call_id"]
        messages.append(message)
    functions = _indexed(attributes, "llm.request.functions")
    tools = [{"type": "function", "function": {"name": f.get("name"), "description": f.get("description", ""),
                                               "parameters": _maybe_json(f.get("parameters"))}} for f in functions]
    return messages, tools or None


def _maybe_json(value: Any) -> Any:
    try:
        return _loads(value) if isinstance(value, str) else value
    except (json.JSONDecodeError, RecursionError):
        return value


def _openinference(attributes: Mapping[str, Any]) -> tuple[list[dict[str, Any]], list[Any] | None]:
    messages = []
    for item in _indexed(attributes, "llm.input_messages"):
        message: dict[str, Any] = {"role": item.get("message.role", "user")}
        if "message.content" in item:
            message["content"] = _text("llm.input_messages", item["message.content"])
        contents = _indexed(item, "message.contents") if "message.content" not in item else []
        if contents:
            message["content"] = [
                {"type": "text", "text": _text("llm.input_messages", c.get("message_content.text", ""))}
                if c.get("message_content.type", "text") == "text"
                else {"type": "image_url", "image_url": {"url": c.get("message_content.image.image.url")}}
                for c in contents]
        calls = _indexed(item, "message.tool_calls") if len(item) > 2 else []
        if calls:
            message["tool_calls"] = [{"id": c.get("tool_call.id"), "type": "function", "function": {
                "name": c.get("tool_call.function.name"), "arguments": c.get("tool_call.function.arguments", "")}}
                for c in calls]
        for name in ("tool_call_id", "name"):
            if item.get(f"message.{name}"):
                message[name] = item[f"message.{name}"]
        message.setdefault("content", "")
        messages.append(message)
    tools = [_json(t, "tool.json_schema") for t in _indexed(attributes, "llm.tools")]
    return messages, tools or None


READERS = {GENAI: _genai, OPENLLMETRY: _openllmetry, OPENINFERENCE: _openinference}


def _count_keys(attributes: Mapping[str, Any], kind: str) -> tuple[str, str, str]:
    """The attributes holding the prompt's and the cached tokens' counts (``""``: none), and the source's name."""
    if kind == OPENINFERENCE:
        prompt, cached, source = "llm.token_count.prompt", "llm.token_count.prompt_details.cache_read", "cache_read"
    else:
        prompt = next((k for k in ("gen_ai.usage.input_tokens", "gen_ai.usage.prompt_tokens") if k in attributes),
                      "gen_ai.usage.input_tokens")
        cached = next((k for k in ("gen_ai.usage.cache_read.input_tokens", "gen_ai.usage.cache_read_input_tokens")
                       if k in attributes), "")
        source = "cache_read"
    return prompt, cached, source


def _usage(attributes: Mapping[str, Any], kind: str) -> Measured | None:
    prompt, cached, source = _count_keys(attributes, kind)
    cached_tokens = count(attributes.get(cached)) if cached else None
    if cached_tokens is None:
        return None
    prompt_tokens = count(attributes.get(prompt))
    if prompt_tokens is not None and cached_tokens > prompt_tokens:
        return None
    return Measured(prompt_tokens, cached_tokens, source)


MODEL_KEYS = ("gen_ai.request.model", "llm.model_name", "gen_ai.response.model")


def span_problems(attributes: Mapping[str, Any], kind: str) -> list[str]:
    """What of a span's counts and model cannot be used, each naming its attribute: a count that is no whole
    number, a cached count above the prompt's (the column is left empty), a model that is no name."""
    prompt, cached, _ = _count_keys(attributes, kind)
    problems = [f"{key} = {attributes[key]!r:.40} (not a token count): left out" for key in (prompt, cached)
                if key and attributes.get(key) is not None and count(attributes[key]) is None]
    prompt_tokens, cached_tokens = count(attributes.get(prompt)), count(attributes.get(cached)) if cached else None
    if prompt_tokens is not None and cached_tokens is not None and cached_tokens > prompt_tokens:
        problems.append(f"usage not used: {cached_tokens} cached tokens is more than the {prompt_tokens} prompt "
                        f"tokens ({cached} > {prompt})")
    problems += [f"{key} = {attributes[key]!r:.40} (not a model name): left out" for key in MODEL_KEYS
                 if attributes.get(key) is not None and not isinstance(attributes[key], str)]
    return problems


def _provider_tools(tools: list[Any] | None) -> list[str]:
    """Tools the provider runs itself (web search, code interpreter): their results never reach the span."""
    out = []
    for tool in tools or []:
        kind = tool.get("type") if isinstance(tool, Mapping) else None
        if kind not in FUNCTION_TOOL:
            out.append(str(kind))
    return out


def check_round(round_: Round) -> None:
    """What a recorded round cannot show, as a `Gap`: no prompt, a provider-side tool, tool calls without the
    tool definitions."""
    if not any(b.text for m in round_.messages for b in m.blocks):
        raise Gap("the span records no prompt (content capture is off in this instrumentation)")
    provider_side = _provider_tools(round_.raw_tools)
    if provider_side:
        raise Gap(f"a provider-side tool ({', '.join(provider_side)}): what it adds is not in the span")
    calls = any(b.field in TOOL_FIELDS or b.text.startswith("<tool_call_id>") for m in round_.messages
                for b in m.blocks)
    if calls and round_.raw_tools is None:
        raise Gap("the span records tool calls but not the tool definitions")


def gap_round(model: Any, where: str) -> Round:
    """The stand-in for a round whose prompt the record does not hold (`Round.gap` says why)."""
    return chat_round({"model": model, "messages": [{"role": "user", "content": ""}]}, where)


def span_round(span: Span, kind: str) -> Round:
    """One LLM span as a round; what it lacks becomes `Round.gap` (the round is kept, with no verdict)."""
    attributes = span.attributes
    if str(attributes.get("input.value", "")).strip() in REDACTED and not _indexed(attributes, "llm.input_messages"):
        attributes = {**attributes, "llm.input_messages.0.message.content": attributes["input.value"]}  # named below
    invocation = _maybe_json(attributes.get("llm.invocation_parameters")) if kind == OPENINFERENCE else {}
    invocation = invocation if isinstance(invocation, Mapping) else {}
    model = next((m for m in (invocation.get("model"), *map(attributes.get, MODEL_KEYS)) if isinstance(m, str) and m),
                 None)
    gap = None
    try:
        messages, tools = READERS[kind](attributes)
        round_ = chat_round({"model": model, "messages": messages or [{"role": "user", "content": ""}]}, span.where)
        if tools:  # as `formats.chat_round` reads them, each distinct tool serialized once
            round_.tools, round_.raw_tools = [Block("tools", _tool_text(t)) for t in tools], tools
        check_round(round_)
    except Gap as exc:
        gap = str(exc)
        round_ = gap_round(model, span.where)
    round_.endpoint = span_endpoint(attributes)
    round_.time = datetime.fromtimestamp(span.start_ns / 1e9, timezone.utc) if span.start_ns else None
    round_.measured = None if gap else _usage(attributes, kind)
    round_.gap = gap
    return round_


def span_endpoint(attributes: Mapping[str, Any]) -> str:
    """The server a span called, where it says (it chooses the provider's caching rule, as a log's URL does)."""
    base = attributes.get("gen_ai.openai.api_base")
    if isinstance(base, str) and "://" in base:
        return base
    address, port = attributes.get("server.address"), attributes.get("server.port")
    return f"https://{address}{f':{port}' if port else ''}/" if isinstance(address, str) and address else ""


def _session(span: Span) -> str | None:
    return next((str(span.attributes[k]) for k in SESSION_KEYS if span.attributes.get(k)), None)


def in_conversations(items: list[T], conversation: Callable[[T], str], start: Callable[[T], float]) -> list[T]:
    """Items grouped by conversation, the conversations in the order they began, each in time order."""
    begun: dict[str, float] = {}
    for item in sorted(items, key=start):
        begun.setdefault(conversation(item), start(item))
    return sorted(items, key=lambda item: (begun[conversation(item)], conversation(item), start(item)))


def read_documents(documents: list[tuple[str, Any]]) -> Transcript:
    """Every LLM span of the documents as a round: conversations (session, else trace) in the order they
    began, each in time order. The notes say what was read and which conventions."""
    found: list[tuple[Span, str]] = []
    others = 0
    sessions: dict[str, str] = {}  # a session id on any span of a trace (its root, often) holds for all of them
    for where, document in documents:
        for span in _otlp_spans(document, where):
            session = _session(span)
            if session is not None:
                sessions.setdefault(span.trace_id, session)
            kind = family(span.attributes)
            if kind is None:
                others += 1
            else:
                found.append((span, kind))

    def conversation(span: Span) -> str:
        return _session(span) or sessions.get(span.trace_id) or span.trace_id

    found = in_conversations(found, lambda item: conversation(item[0]), lambda item: item[0].start_ns)
    rounds, errors, unused = [], [], []
    for span, kind in found:
        try:
            rounds.append(span_round(span, kind))
        except ValueError as exc:
            errors.append(f"{span.where}: {exc}")
        unused += [f"{span.where}: {problem}" for problem in span_problems(span.attributes, kind)]
    kinds = sorted({kind for _, kind in found})
    named = len({conversation(s) for s, _ in found} - {s.trace_id for s, _ in found})
    notes = [f"read as a trace ({', '.join(kinds) or 'no LLM spans'}): {len(found)} LLM spans, one round each, from "
             f"{len({s.trace_id for s, _ in found})} traces"
             + (f" in {named} sessions" if named else " (no session ids)")
             + f", grouped by session (else trace) and in time order within each; {others} other spans"]
    if any(kind == GENAI for kind in kinds) and not any(r.raw_tools for r in rounds):
        notes.append("the spans record no tool definitions (gen_ai.tool.definitions): a tool list that changed "
                     "cannot be seen, only the messages are compared")
    gaps = [r for r in rounds if r.gap]
    if gaps:
        notes.append(f"{len(gaps)} of {len(rounds)} spans do not hold their whole prompt: those rounds get no verdict")
    return Transcript(rounds, errors, "trace", notes, unused=unused)


def read_text(text: str, name: str) -> Transcript | None:
    """A trace file (one JSON document, or one export per line as the collector's file exporter writes),
    else None: the caller reads it as a request log."""
    stripped = text.lstrip()
    if not stripped.startswith("{"):
        return None
    first = stripped.split("\n", 1)[0]
    try:
        head = json.loads(first)
    except (json.JSONDecodeError, RecursionError):
        head = None
    if is_trace(head):
        documents = []
        for number, line in enumerate(text.split("\n"), start=1):
            if line.strip():
                try:
                    documents.append((f"{name} line {number}", json.loads(line)))
                except json.JSONDecodeError as exc:
                    raise TraceError(f"{name} line {number}: not valid JSON ({json_problem(exc)})"
                                     ) from None
                except RecursionError:
                    raise TraceError(f"{name} line {number}: nested too deeply to read (deeper than Python's "
                                     "recursion limit)") from None
        return read_documents(documents)
    if head is not None:  # a one-line JSON document that is not a trace: a request log
        return None
    try:
        whole = json.loads(text)
    except (json.JSONDecodeError, RecursionError):
        return None
    return read_documents([(name, whole)]) if is_trace(whole) else None
