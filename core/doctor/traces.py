"""Traces as rounds: the spans an observability tool exported, read beside the request logs.

Each LLM span is one round, read from the attributes its instrumentation wrote:

- OpenTelemetry GenAI semantic conventions: ``gen_ai.system_instructions``, ``gen_ai.input.messages``
  (messages of typed parts), ``gen_ai.tool.definitions``, ``gen_ai.request.model``, ``gen_ai.usage.input_tokens``
  and ``gen_ai.usage.cache_read.input_tokens``; and the older flat ``gen_ai.prompt.{i}.*`` attributes with
  ``llm.request.functions.{i}.*`` that OpenLLMetry writes.
- OpenInference (Arize Phoenix, the openinference instrumentations): ``llm.input_messages.{i}.message.*``,
  ``llm.tools.{i}.tool.json_schema``, ``llm.invocation_parameters`` (the model, and the parameters a provider keys
  its cache on or routes by: ``prompt_cache_key``, ``user``, ...), ``llm.token_count.prompt`` and
  ``llm.token_count.prompt_details.cache_read``.
- The Vercel AI SDK (its ``doGenerate``/``doStream`` spans): ``ai.prompt.messages`` (messages of parts),
  ``ai.prompt.tools``, ``ai.model.id``, ``ai.usage.inputTokens`` and ``ai.usage.cachedInputTokens``.
- MLflow tracing (``mlflow.<flavor>.autolog()``, ``Trace.to_json()``): a span whose ``mlflow.spanType`` is
  ``CHAT_MODEL`` or ``LLM`` holds the request itself in ``mlflow.spanInputs`` (the client call's keyword
  arguments: a Chat Completions, Anthropic, Responses or Gemini body, read by `formats.read_body`), the tools also in
  ``mlflow.chat.tools`` and the usage in ``mlflow.chat.tokenUsage`` (``input_tokens``,
  ``cache_read_input_tokens``). MLflow writes every attribute as JSON, strings too (``"\"CHAT_MODEL\""``).
- Pydantic Logfire (``logfire.instrument_openai()``, its ``logfire.*`` attributes): with ``version=1`` the whole
  request body as a JSON string in ``request_data`` (read by `formats.read_body`); by default (version 2) GenAI's
  attributes, ``request_data`` holding the model alone. Its cached count is written only when not zero; the usage
  the provider returned, in ``gen_ai.usage.raw`` (a JSON string), says the zero.

Content an instrumentation put on the span's events (GenAI attributes on an event, or one event per message) is
read as if it were on the span.

The documents: every layout `spans` reads (OTLP JSON, the SDK's span objects, concatenated, listed or one per
line). Rounds are grouped into conversations (session, else trace) and ordered in time within each; LLM spans
nested in one another are one call (`calls.one_per_call`). A round is rebuilt as a Chat Completions body and read
by `formats.chat_round`, so the analysis, the CLI and the page treat it like a logged request.

What a span does not hold is named per round and the round gets no verdict (`Round.gap`): content cut at an
exporter's length limit, redacted or not captured, a provider-side tool whose results never reach the span. Tool
calls without the tool definitions are compared on their messages, the notes saying where the tools were looked
for (`TOOL_PLACES`).
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Callable, Mapping
from datetime import datetime, timezone
from typing import Any, TypeVar

from core import words
from core.backends.usage import count
from core.doctor import jsontext, spans
from core.doctor.calls import Node, one_per_call
from core.doctor.formats import KEYED, ROUTING_KEYS, chat_round, read_body
from core.doctor.model import CHAT, Block, Measured, Round, Transcript
from core.doctor.spans import Span
from core.words import Sentence, said

GENAI, OPENLLMETRY, OPENINFERENCE = "OpenTelemetry GenAI", "OpenLLMetry (gen_ai.prompt.*)", "OpenInference"
VERCEL = "Vercel AI SDK (ai.prompt.*)"
MLFLOW = "MLflow (mlflow.spanInputs)"
LOGFIRE = "Pydantic Logfire (request_data)"
MLFLOW_LLM_TYPES = ("CHAT_MODEL", "LLM")
MLFLOW_USAGE = "mlflow.chat.tokenUsage"
RAW_USAGE = "gen_ai.usage.raw"  # Logfire: the usage object the provider returned, as a JSON string
# its cached count in the providers' shapes (Chat Completions, Responses, Anthropic), read where the span's own
# cached count is missing (Logfire leaves out a zero)
RAW_CACHED = tuple(f"{RAW_USAGE}.{key}" for key in ("prompt_tokens_details.cached_tokens",
                                                   "input_tokens_details.cached_tokens", "cache_read_input_tokens"))
SESSION_KEYS = ("session.id", "gen_ai.conversation.id", "langfuse.session.id",
                "traceloop.association.properties.session_id")
REDACTED = ("__REDACTED__", "<redacted>", "[REDACTED]", "[redacted]")
TRUNCATION_MARKS = ("...[truncated]", "[TRUNCATED]", "…[truncated]", "... (truncated)")
# OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT and the instrumentations' own limits are set in these sizes: a text exactly
# this long was most likely cut there
CUT_LENGTHS = frozenset(2 ** n for n in range(10, 21)) | frozenset({1000, 2000, 4000, 5000, 8000, 10000, 12000, 16000,
                                                                    32000, 64000, 100000})
GENAI_CONTENT = ("gen_ai.input.messages", "gen_ai.system_instructions")
T = TypeVar("T")
FUNCTION_TOOL = ("function", "custom", None)
TOOL_FIELDS = ("tool_calls", "tool_call_id", "function_call", "tool_use", "tool_result")  # `Block.field`s of calls


class TraceError(ValueError):
    """The document is a trace, but cannot be read; the message says why."""


def is_trace(document: Any) -> bool:
    """Whether a JSON document holds spans in a layout `spans` reads (never a request body or log wrapper)."""
    return spans.layout(document) is not None


def family(attributes: Mapping[str, Any]) -> str | None:
    """Which conventions an LLM span follows, or None for a span that is not an LLM call."""
    if _mlflow_value(attributes.get("mlflow.spanType")) in MLFLOW_LLM_TYPES:
        return MLFLOW
    if _is_logfire_request(attributes):
        return LOGFIRE
    if attributes.get("openinference.span.kind") == "LLM" or any(k.startswith("llm.input_messages.")
                                                                  for k in attributes):
        return OPENINFERENCE
    if any(k in attributes for k in GENAI_CONTENT):
        return GENAI
    if any(k.startswith("gen_ai.prompt.") for k in attributes):
        return OPENLLMETRY
    if "ai.prompt.messages" in attributes:  # the AI SDK's doGenerate/doStream span: the model call itself
        return VERCEL
    operation = attributes.get("gen_ai.operation.name")
    if operation in ("chat", "text_completion", "generate_content") or "gen_ai.request.model" in attributes:
        return GENAI  # an LLM span without its content: named, never compared
    return None


def _loads(text: str, what: str = "the attribute") -> Any:
    """A JSON attribute (`jsontext.loads`: bounded, parsed once per distinct text, shared by the rounds)."""
    return jsontext.loads(text, what)


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
    tools = _loads(text, "gen_ai.tool.definitions")
    return [_chat_tool(t) for t in tools] if isinstance(tools, list) else None


class Gap(Exception):
    """What a span does not hold, in words; the round is kept with no verdict."""


def gap_of(exc: Exception, where: str) -> str:
    """Why a record cannot be read, without the ``where`` it is said at: a `Sentence` kept whole."""
    message = said(exc)
    return message if isinstance(message, Sentence) else message.removeprefix(f"{where}: ")


def _json(attributes: Mapping[str, Any], key: str, default: Any = None) -> Any:
    """A JSON attribute; one that does not parse was cut (`Gap`)."""
    value = attributes.get(key)
    if value is None or not isinstance(value, str):
        return default if value is None else value
    _check_text(key, value)
    if not value.lstrip().startswith(("[", "{")):  # plain text where JSON was specified (LiteLLM's instructions)
        return value
    try:
        return _loads(value, key)
    except jsontext.NotJson as exc:
        raise Gap(Sentence("doctor_read.cut", problem=said(exc))) from None


def _check_text(key: str, value: str) -> None:
    if value.strip() in REDACTED:
        raise Gap(Sentence("doctor_read.redacted", field=key, value=value.strip()))
    if value.endswith(TRUNCATION_MARKS):
        raise Gap(Sentence("doctor_read.truncation_mark", field=key))
    if len(value) in CUT_LENGTHS:
        raise Gap(Sentence("doctor_read.cut_at", field=key, n=len(value)))


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
    """``value`` as a list of JSON objects, else a `Gap` naming the attribute and (``what``, the key of its words)
    what it should list (a hostile or broken exporter)."""
    if not isinstance(value, list) or not all(isinstance(item, Mapping) for item in value):
        shown = type(value).__name__ if isinstance(value, list | Mapping) else repr(value)[:40]
        raise Gap(Sentence("doctor_read.not_objects", field=key, what=Sentence(what),
                           shown=shown))
    return value


def genai_message(message: Mapping[str, Any], key: str) -> dict[str, Any]:
    """A GenAI semconv message (``role``, ``parts``) as a Chat Completions message."""
    out: dict[str, Any] = {"role": message.get("role", "user")}
    texts, calls = [], []
    for part in _objects(message.get("parts") or [], key, "doctor_read.what_parts"):
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
                for m in _objects(_json(attributes, "gen_ai.input.messages", []), "gen_ai.input.messages",
                                  "doctor_read.what_messages")]
    if system:
        parts = [{"type": "text", "content": system}] if isinstance(system, str) \
            else _objects(system, "gen_ai.system_instructions", "doctor_read.what_parts")
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


def _maybe_json(value: Any, what: str = "the attribute") -> Any:
    return jsontext.lenient(value, what)[0]


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


def _vercel_message(message: Mapping[str, Any]) -> list[dict[str, Any]]:
    """An AI SDK message (content a text, or parts: ``text``, ``tool-call``, ``tool-result``) as Chat Completions
    messages: a tool message's results become one ``role: tool`` message each."""
    role, content = message.get("role", "user"), message.get("content")
    if not isinstance(content, list):
        return [{"role": role, "content": _text("ai.prompt.messages", content if content is not None else "")}]
    texts, calls, results = [], [], []
    for part in content:
        kind = part.get("type") if isinstance(part, Mapping) else None
        if kind == "text":
            texts.append(_text("ai.prompt.messages", part.get("text", "")))
        elif kind == "tool-call":
            calls.append({"id": part.get("toolCallId"), "type": "function", "function": {
                "name": part.get("toolName"), "arguments": json.dumps(part.get("input", part.get("args")),
                                                                      ensure_ascii=False)}})
        elif kind == "tool-result":
            results.append({"role": "tool", "tool_call_id": part.get("toolCallId"),
                            "content": json.dumps(part.get("output", part.get("result")), ensure_ascii=False)})
        else:
            texts.append(json.dumps(part, ensure_ascii=False, sort_keys=True))
    out: dict[str, Any] = {"role": role, "content": "".join(texts)}
    return results or [{**out, **({"tool_calls": calls} if calls else {})}]


def _vercel(attributes: Mapping[str, Any]) -> tuple[list[dict[str, Any]], list[Any] | None]:
    messages = _json(attributes, "ai.prompt.messages", [])
    if not isinstance(messages, list):
        raise Gap(Sentence("doctor_read.vercel_not_list", kind=type(messages).__name__))
    return [m for message in messages if isinstance(message, Mapping) for m in _vercel_message(message)], None


READERS = {GENAI: _genai, OPENLLMETRY: _openllmetry, OPENINFERENCE: _openinference, VERCEL: _vercel}


def _mlflow_value(value: Any) -> Any:
    """An MLflow attribute as MLflow meant it: every value is stored JSON-encoded (``"\"CHAT_MODEL\""``)."""
    return jsontext.lenient(value, "the MLflow attribute")[0] if isinstance(value, str) else value


REQUEST_KEYS = ("messages", "input", "instructions", "contents")  # what makes a JSON object a request body


def _held(body: Any) -> Sentence:
    """What a field holds where a request body should be: its keys, or its JSON type."""
    return Sentence("doctor_read.the_keys", keys=sorted(body)[:6]) if isinstance(body, Mapping) \
        else Sentence("doctor_read.a_json", kind=type(body).__name__)


def _mlflow(attributes: Mapping[str, Any]) -> dict[str, Any]:
    """The request body MLflow's autolog kept in ``mlflow.spanInputs`` (the client call's keyword arguments), with
    ``mlflow.chat.tools`` where the body has no tools; a `Gap` naming what it holds when it is no request."""
    body = _json(attributes, "mlflow.spanInputs")
    if body is None:
        raise Gap(Sentence("doctor_read.mlflow_no_inputs"))
    if not isinstance(body, Mapping) or not any(key in body for key in REQUEST_KEYS):
        raise Gap(Sentence("doctor_read.mlflow_not_request", shown=_held(body)))
    tools = _mlflow_value(attributes.get("mlflow.chat.tools"))
    if "tools" not in body and "messages" in body and isinstance(tools, list) and tools:
        return {**body, "tools": tools}
    return dict(body)


def _is_logfire_request(attributes: Mapping[str, Any]) -> bool:
    """A Logfire span whose ``request_data`` is the request (version 1), or would be but cannot be read: not one
    whose prompt is in GenAI's attributes (version 2, ``request_data`` the model alone)."""
    if "request_data" not in attributes or not any(key.startswith("logfire.") for key in attributes):
        return False
    body, problem = jsontext.lenient(attributes["request_data"], "request_data")
    has_request = isinstance(body, Mapping) and any(key in body for key in REQUEST_KEYS)
    return has_request or problem is not None or not any(k in attributes for k in GENAI_CONTENT)


def _logfire(attributes: Mapping[str, Any]) -> dict[str, Any]:
    """The request body Logfire kept in ``request_data``; a `Gap` naming what it holds when it is no request."""
    body = _json(attributes, "request_data")
    if not isinstance(body, Mapping) or not any(key in body for key in REQUEST_KEYS):
        raise Gap(Sentence("doctor_read.logfire_not_request", shown=_held(body)))
    return dict(body)


# conventions whose span holds the request body itself, in any format `formats` reads
BODIES = {MLFLOW: _mlflow, LOGFIRE: _logfire}


def _body_round(body: dict[str, Any], where: str) -> Round:
    """A span's request body as a round (`formats.read_body`: its format as the body shows it)."""
    try:
        return read_body(body, where)
    except ValueError as exc:
        raise Gap(gap_of(exc, where)) from None


def _function(name: Any, description: Any, parameters: Any) -> dict[str, Any]:
    return {"type": "function", "function": {"name": name, "description": description or "",
                                             "parameters": parameters}}


def _listed(value: Any, key: str) -> list[Any] | None:
    tools = value.get(key) if isinstance(value, Mapping) else None
    return tools if isinstance(tools, list) and tools else None


def _pydantic_tools(value: Any) -> list[Any] | None:
    """pydantic-ai's ``model_request_parameters``: ``function_tools`` and ``output_tools`` with their schema."""
    tools = (_listed(value, "function_tools") or []) + (_listed(value, "output_tools") or [])
    return [_function(t.get("name"), t.get("description"), t.get("parameters_json_schema"))
            for t in tools if isinstance(t, Mapping)] or None


def _vercel_tools(value: Any) -> list[Any] | None:
    """The Vercel AI SDK's ``ai.prompt.tools``: one JSON string per tool, in GenAI's flat shape."""
    if not isinstance(value, list):
        return None
    return [_chat_tool(_maybe_json(t, "ai.prompt.tools")) for t in value] or None


# where instrumentations keep the tool list when not under their own convention's key, in the order looked at
TOOL_PLACES: tuple[tuple[str, Callable[[Any], list[Any] | None]], ...] = (
    ("gen_ai.tool.definitions", lambda v: v if isinstance(v, list) and v else None),
    ("llm.invocation_parameters", lambda v: _listed(v, "tools")),
    ("input.value", lambda v: _listed(v, "tools")),  # OpenInference: the request body itself
    ("model_request_parameters", _pydantic_tools),
    ("ai.prompt.tools", _vercel_tools),
)
LOOKED_FOR_TOOLS = "llm.tools, llm.request.functions, " + ", ".join(key for key, _ in TOOL_PLACES)


def span_tools(attributes: Mapping[str, Any]) -> list[Any] | None:
    """The tool list from the first `TOOL_PLACES` entry that holds one, in the Chat Completions shape."""
    for key, read in TOOL_PLACES:
        if key in attributes:
            tools = read(_maybe_json(attributes[key], key))
            if tools:
                return [_chat_tool(t) for t in tools]
    return None


def _count_keys(attributes: Mapping[str, Any], kind: str) -> tuple[str, str, str]:
    """The attributes holding the prompt's and the cached tokens' counts (``""``: none), and the source's name."""
    if kind == OPENINFERENCE:
        prompt, cached, source = "llm.token_count.prompt", "llm.token_count.prompt_details.cache_read", "cache_read"
    elif kind == MLFLOW:
        prompt, cached = f"{MLFLOW_USAGE}.input_tokens", f"{MLFLOW_USAGE}.cache_read_input_tokens"
        source = "cache_read_input_tokens"
    elif kind == VERCEL and "ai.usage.cachedInputTokens" in attributes:
        prompt = next((k for k in ("ai.usage.inputTokens", "ai.usage.promptTokens") if k in attributes), "")
        cached, source = "ai.usage.cachedInputTokens", "ai.usage.cachedInputTokens"
    else:
        prompt = next((k for k in ("gen_ai.usage.input_tokens", "gen_ai.usage.prompt_tokens") if k in attributes),
                      "gen_ai.usage.input_tokens")
        cached = next((k for k in ("gen_ai.usage.cache_read.input_tokens", "gen_ai.usage.cache_read_input_tokens",
                                   *RAW_CACHED) if k in attributes), "")
        source = cached.rsplit(".", 1)[-1] if cached in RAW_CACHED else "cache_read"
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


MODEL_KEYS = ("gen_ai.request.model", "llm.model_name", "gen_ai.response.model", "mlflow.llm.model")


def span_problems(attributes: Mapping[str, Any], kind: str) -> list[str]:
    """What of a span's counts and model cannot be used, each naming its attribute: a count that is no whole
    number, a cached count above the prompt's (the column is left empty), a model that is no name."""
    prompt, cached, _ = _count_keys(attributes, kind)
    problems: list[str] = [Sentence("doctor_input_refused.span_not_count", field=key, value=f"{attributes[key]!r:.40}")
                           for key in (prompt, cached)
                           if key and attributes.get(key) is not None and count(attributes[key]) is None]
    prompt_tokens, cached_tokens = count(attributes.get(prompt)), count(attributes.get(cached)) if cached else None
    if prompt_tokens is not None and cached_tokens is not None and cached_tokens > prompt_tokens:
        problems.append(Sentence("doctor_input_refused.span_impossible", cached=cached_tokens, prompt=prompt_tokens,
                                 cached_key=cached, prompt_key=prompt))
    problems += [Sentence("doctor_input_refused.not_model", field=key, value=f"{attributes[key]!r:.40}")
                 for key in MODEL_KEYS if attributes.get(key) is not None and not isinstance(attributes[key], str)]
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
    """What a recorded round cannot show, as a `Gap`: no prompt, a provider-side tool."""
    if not any(b.text for m in round_.messages for b in m.blocks):
        raise Gap(Sentence("doctor_read.no_prompt"))
    provider_side = _provider_tools(round_.raw_tools)
    if provider_side:
        raise Gap(Sentence("doctor_read.provider_tool", tools=", ".join(provider_side)))


def history_elsewhere(round_: Round) -> None:
    """A call whose first turn is a tool's result sent only what it adds (the history lives on the server, as
    with ``previous_response_id``): marked so, it is compared as such, never as an edited history."""
    first = next((m for m in round_.messages if m.role not in ("system", "developer")), None)
    if first is not None and (first.role in ("tool", "function")
                              or any(b.field == "tool_call_id" for b in first.blocks)):
        round_.server_history = True


LLM_SPANS, SPANS = Sentence("doctor_notes.unit.llm_spans"), Sentence("doctor_notes.unit.spans")


def counted(records: int, unit: Sentence, rounds: int) -> Sentence:
    """How many records were read, and as how many calls where some were merged."""
    if rounds == records:
        return Sentence("doctor_notes.counted", n=records, unit=words.counted(unit.key, records))
    return Sentence("doctor_notes.counted_as_one" if rounds == 1 else "doctor_notes.counted_as", n=records,
                    unit=words.counted(unit.key, records), calls=rounds)


def in_sessions(named: int) -> Sentence:
    return words.counted("doctor_notes.in_sessions", named) if named else Sentence("doctor_notes.no_sessions")


def history_notes(rounds: list[Round]) -> list[str]:
    return [Sentence("doctor_notes.history", source=r.source) for r in rounds if r.server_history]


def tools_unseen(round_: Round) -> bool:
    """A round that calls tools but records no tool list: its messages are compared, its tools cannot be."""
    return round_.raw_tools is None and not round_.gap and any(
        b.field in TOOL_FIELDS or b.text.startswith("<tool_call_id>") for m in round_.messages for b in m.blocks)


def tool_notes(rounds: list[Round], unit: Sentence) -> list[str]:
    """What the rounds say of their tool lists, where one could not be seen."""
    read = [r for r in rounds if not r.gap]
    if read and not any(r.raw_tools for r in read):
        return [Sentence("doctor_notes.no_tools", unit=unit, looked=LOOKED_FOR_TOOLS)]
    unseen = sum(tools_unseen(r) for r in read)
    return [words.counted("doctor_notes.tools_unseen", unseen, total=len(read),
                          unit=words.counted(unit.key, len(read)), looked=LOOKED_FOR_TOOLS)] if unseen else []


def gaps_note(rounds: list[Round], unit: Sentence) -> list[str]:
    """How many rounds do not hold their whole prompt (no verdict for them), verb and noun agreeing."""
    gaps = sum(1 for r in rounds if r.gap)
    return [words.counted("doctor_notes.gaps", gaps, total=len(rounds),
                          unit=words.counted(unit.key, len(rounds)))] if gaps else []


def gap_round(model: Any, where: str) -> Round:
    """The stand-in for a round whose prompt the record does not hold (`Round.gap` says why)."""
    return chat_round({"model": model, "messages": [{"role": "user", "content": ""}]}, where)


def span_round(span: Span, kind: str) -> Round:
    """One LLM span as a round; what it lacks becomes `Round.gap` (the round is kept, with no verdict)."""
    attributes = span.attributes
    invocation = _maybe_json(attributes.get("llm.invocation_parameters")) if kind == OPENINFERENCE else {}
    invocation = invocation if isinstance(invocation, Mapping) else {}
    model = (invocation.get("model") or attributes.get("gen_ai.request.model") or attributes.get("llm.model_name")
             or attributes.get("ai.model.id") or attributes.get("gen_ai.response.model")
             or attributes.get("mlflow.llm.model"))
    gap = None
    try:
        hidden = str(attributes.get("input.value", "")).strip()
        if hidden in REDACTED and not _indexed(attributes, "llm.input_messages"):
            raise Gap(Sentence("doctor_read.hidden_inputs", value=hidden))
        if kind in BODIES:
            round_ = _body_round(BODIES[kind](attributes), span.where)
        else:
            messages, tools = READERS[kind](attributes)
            tools = tools or span_tools(attributes)
            keyed = {key: invocation[key] for key in KEYED[CHAT] if invocation.get(key) is not None}
            round_ = chat_round({"model": model, "messages": messages or [{"role": "user", "content": ""}], **keyed},
                                span.where)
            round_.routing = {key: invocation[key] for key in ROUTING_KEYS if invocation.get(key) is not None}
            if tools:  # as `formats.chat_round` reads them, each distinct tool serialized once
                round_.tools, round_.raw_tools = [Block("tools", _tool_text(t)) for t in tools], tools
        check_round(round_)
    except Gap as exc:
        gap = said(exc)
        round_ = gap_round(model, span.where)
    history_elsewhere(round_)
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


MESSAGE_EVENTS = {"gen_ai.system.message": "system", "gen_ai.user.message": "user",
                  "gen_ai.assistant.message": "assistant", "gen_ai.tool.message": "tool"}


def _spread(out: dict[str, Any], key: str) -> None:
    """A usage object (or its JSON string) at ``key`` spread into one attribute per count, one level of details
    deep (``gen_ai.usage.raw.prompt_tokens_details.cached_tokens``), so the counts are read, and named when
    unreadable, like any convention's."""
    usage = _maybe_json(out.get(key), key)
    for name, value in usage.items() if isinstance(usage, Mapping) else ():
        if isinstance(value, Mapping):
            out.update({f"{key}.{name}.{inner}": part for inner, part in value.items()})
        else:
            out[f"{key}.{name}"] = value


def with_usage(attributes: dict[str, Any]) -> dict[str, Any]:
    """MLflow's JSON-encoded attributes that are read as values decoded (``mlflow.spanType``, ``mlflow.llm.model``)
    and its usage object spread (`_spread`); Logfire's ``gen_ai.usage.raw`` spread the same way."""
    if "mlflow.spanType" not in attributes and RAW_USAGE not in attributes:
        return attributes
    out: dict[str, Any] = dict(attributes)
    out.update({key: _mlflow_value(attributes[key]) for key in ("mlflow.spanType", "mlflow.llm.model")
                if key in attributes})
    _spread(out, MLFLOW_USAGE)
    _spread(out, RAW_USAGE)
    return out


def with_events(span: Span) -> dict[str, Any]:
    """A span's attributes with the content its events hold: GenAI attributes put on an event
    (``gen_ai.input.messages``, ``gen_ai.system_instructions``, ``gen_ai.tool.definitions``), and the older
    one-event-per-message convention (``gen_ai.user.message`` with ``content``) as ``gen_ai.input.messages``;
    MLflow's attributes and the usage objects decoded (`with_usage`)."""
    if not span.events:
        return with_usage(span.attributes)
    attributes, messages = dict(span.attributes), []
    for name, values in span.events:
        for key, value in values.items():
            if key.startswith("gen_ai.") and key not in attributes:
                attributes[key] = value
        if name in MESSAGE_EVENTS:
            content = values.get("content", values.get("gen_ai.event.content", ""))
            messages.append({"role": MESSAGE_EVENTS[name], "parts": [{"type": "text", "content": content}]})
    if messages and "gen_ai.input.messages" not in attributes:
        attributes["gen_ai.input.messages"] = messages
    return with_usage(attributes)


def read_documents(documents: list[tuple[str, Any]]) -> Transcript:
    """Every LLM call of the documents' spans as a round (`calls.one_per_call`): conversations (session, else
    trace) in the order they began, each in time order. The notes say what was read and which conventions."""
    found: list[tuple[Span, str]] = []
    others: dict[str, int] = {}  # the names of the spans that are no LLM call, and how many of each
    sessions: dict[str, str] = {}  # a session id on any span of a trace (its root, often) holds for all of them
    for where, document in documents:
        layout = spans.layout(document)
        for span in layout.spans(document, where) if layout else ():
            span.attributes = with_events(span)
            session = _session(span)
            if session is not None:
                sessions.setdefault(span.trace_id, session)
            kind = family(span.attributes)
            if kind is None:
                others[span.name] = others.get(span.name, 0) + 1
            else:
                found.append((span, kind))

    def conversation(span: Span) -> str:
        return _session(span) or sessions.get(span.trace_id) or span.trace_id

    found = in_conversations(found, lambda item: conversation(item[0]), lambda item: item[0].start_ns)
    nodes: list[Node] = []
    errors: list[str] = []
    unused: list[str] = []
    for span, kind in found:
        try:
            nodes.append(Node(span.span_id, span.parent, span_round(span, kind), span.start_ns, span.end_ns))
        except ValueError as exc:
            errors.append(Sentence("doctor_read.at", where=span.where, problem=said(exc)))
        unused += [Sentence("doctor_read.at", where=span.where, problem=problem)
                   for problem in span_problems(span.attributes, kind)]
    nodes, merged = one_per_call(nodes, LLM_SPANS)
    rounds = [node.round for node in nodes]
    kinds = sorted({kind for _, kind in found})
    named = len({conversation(s) for s, _ in found} - {s.trace_id for s, _ in found})
    notes: list[str] = [Sentence("doctor_notes.read_trace",
                                 kinds=", ".join(kinds) or Sentence("doctor_notes.no_llm_spans"),
                                 counted=counted(len(found), LLM_SPANS, len(rounds)),
                                 traces=words.counted("doctor_notes.traces", len({s.trace_id for s, _ in found})),
                                 sessions=in_sessions(named),
                                 others=words.counted("doctor_notes.other_spans", sum(others.values())))]
    notes += merged + tool_notes(rounds, SPANS) + history_notes(rounds)
    notes += gaps_note(rounds, SPANS)
    if not found and documents:
        errors.append(no_llm_span(documents[0][0].split(" line ")[0], others))
    return Transcript(rounds, errors, "trace", notes, unused=unused)


LOOKED_FOR_CALLS = ("OpenInference's openinference.span.kind LLM or llm.input_messages, GenAI's gen_ai.input.messages "
                    "or gen_ai.operation.name, OpenLLMetry's gen_ai.prompt.*, the Vercel AI SDK's ai.prompt.messages, "
                    "MLflow's mlflow.spanType CHAT_MODEL or LLM, Logfire's request_data")


def no_llm_span(name: str, others: Mapping[str, int]) -> Sentence:
    """Why a trace gave no round: which spans it holds, and what was looked for on each."""
    shown = ", ".join(f"{span!r} x{n}" if n > 1 else repr(span) for span, n in list(others.items())[:6])
    n = sum(others.values())
    held = Sentence("doctor_read.held_one" if n == 1 else "doctor_read.held_many", n=n,
                    shown=shown + (", ..." if len(others) > 6 else "")) if others else Sentence("doctor_read.held_none")
    return Sentence("doctor_read.no_llm_span", name=name, held=held, looked=LOOKED_FOR_CALLS)


# Logfire's console output: a span's start time and its message, indented by depth, tags in brackets
LOGFIRE_LINE = re.compile(r"\d\d:\d\d:\d\d\.\d{3} +\S"
                          r"|\s*(Chat Completion|Responses API|Completion|Message) with \S.* \[LLM\]$")


def console_lines(text: str, name: str) -> Sentence | None:
    """A file of Logfire's console lines (what ``logfire.configure()`` prints: one line per span, its time and
    message, never the request): the sentence refusing it, naming its first line and what to export instead;
    None for any other text."""
    lines = [(number, line) for number, line in enumerate(text.split("\n")[:50], start=1) if line.strip()]
    if not lines or not all(LOGFIRE_LINE.match(line) for _, line in lines[:3]):
        return None
    return Sentence("doctor_notes.logfire_console", name=name, line=lines[0][0])


def read_text(text: str, name: str) -> Transcript | None:
    """A file of spans in any layout `spans` reads, else None (`read_found` on the file's documents)."""
    return read_found(*spans.documents(text, name))


def read_found(found: list[tuple[str, Any]], problem: str | None) -> Transcript | None:
    """The documents of a file (`spans.documents`) read as spans when the first holds spans, else None: the
    caller reads them as a request log or an export. A later part that is not JSON (a file cut mid-write) is an
    error naming its line, and the spans before it are read; documents that hold no spans are counted in the
    notes."""
    if not found or not is_trace(found[0][1]):
        return None
    traced = [(where, document) for where, document in found if is_trace(document)]
    transcript = read_documents(traced)
    if problem:
        transcript.errors.append(Sentence("doctor_read.spans_after", problem=problem))
    if len(traced) < len(found):
        transcript.notes.append(Sentence("doctor_notes.no_spans", n=len(found) - len(traced),
                                         first=next(w for w, d in found if not is_trace(d))))
    return transcript
