"""Request bodies in each format an agent logs, read into `Round`s: every part that reaches the model kept.

Chat Completions (``messages``), OpenAI Responses (``instructions``/``input``), Anthropic Messages
(top-level ``system``, ``input_schema`` tools, content blocks) and Gemini ``generateContent``
(``systemInstruction``/``contents``). The system prompt always becomes message 0, so the same agent
rounds get the same message numbers in every format.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any

from core.doctor.model import ANTHROPIC, CHAT, GEMINI, RESPONSES, Block, Message, Round
from core.words import Sentence

ANTHROPIC_ONLY_BLOCKS = {"tool_use", "tool_result", "thinking", "redacted_thinking", "document"}
# request parameters a provider keys its cache on (a change invalidates what comes after them)
KEYED = {CHAT: ("prompt_cache_key", "chat_template_kwargs"), RESPONSES: ("prompt_cache_key",),
         ANTHROPIC: ("tool_choice", "thinking"), GEMINI: ()}


def _dump(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def _digest(data: str) -> str:
    return hashlib.sha256(data.encode()).hexdigest()[:16]


def _ttl(part: Any) -> str | None:
    control = part.get("cache_control") if isinstance(part, dict) else None
    return str(control.get("ttl", "5m")) if isinstance(control, dict) else None


STAND_IN = re.compile(r"<(?:image|file) [^<>]*>")  # what `_media` writes for an image or a file


def _media(kind: str, source: Any) -> str:
    """An image or file as a stable token: its type and a digest of its bytes or URL (a re-encoding shows)."""
    if isinstance(source, str):
        return f"<{kind} {_digest(source)}>"
    source = source if isinstance(source, dict) else {}
    data = source.get("data") or source.get("url") or source.get("file_id") or source.get("fileUri") or _dump(source)
    media_type = source.get("media_type") or source.get("mimeType") or source.get("type", "")
    return f"<{kind} {media_type} {_digest(str(data))}>"


def blocks(content: Any) -> list[Block]:
    """Content in any format (a string, or parts of any type) as blocks."""
    if content is None:
        return []
    if isinstance(content, str):
        return [Block("content", content)]
    if not isinstance(content, list):
        return [Block("content", _dump(content))]
    out: list[Block] = []
    for part in content:
        out.append(_block(part) if isinstance(part, dict) else Block("content", _dump(part)))
    return out


def _block(part: dict[str, Any]) -> Block:
    kind, ttl = part.get("type"), _ttl(part)
    if kind in ("text", "input_text", "output_text", "refusal") or (kind is None and "text" in part):
        field = "thinking" if part.get("thought") else "content"
        return Block(field, str(part.get("text", part.get("refusal", ""))), ttl)
    if kind in ("image", "image_url", "input_image") or "inlineData" in part:
        source = part.get("source") or part.get("image_url") or part.get("inlineData")
        return Block("image", _media("image", source), ttl)
    if kind in ("document", "file", "input_file") or "fileData" in part:
        return Block("attachment", _media("file", part.get("source") or part.get("file") or part.get("fileData")), ttl)
    if kind == "tool_use" or "functionCall" in part:
        call = {k: part[k] for k in ("id", "name", "input") if k in part} if kind else part["functionCall"]
        return Block("tool_calls", _dump(call), ttl)
    if kind == "tool_result":
        inner = part.get("content")
        text = "".join(b.text for b in blocks(inner)) if isinstance(inner, list) else _dump(inner or "")
        return Block("content", f"<tool_call_id>{part.get('tool_use_id', '')}{text}", ttl)
    if "functionResponse" in part:
        return Block("content", _dump(part["functionResponse"]), ttl)
    if kind in ("thinking", "redacted_thinking"):
        return Block("thinking", str(part.get("thinking", part.get("data", ""))), ttl)
    return Block(str(kind or "content"), _dump({k: v for k, v in part.items() if k != "cache_control"}), ttl)


def _tools(tools: Any, where: str) -> tuple[list[Block], list[Any] | None]:
    if tools is None:
        return [], None
    if not isinstance(tools, list):
        raise ValueError(f'{where}: "tools" is not a list')
    flat: list[Any] = []
    for tool in tools:  # Gemini groups function declarations in one tool
        grouped = isinstance(tool, dict) and "functionDeclarations" in tool
        flat.extend(tool["functionDeclarations"] if grouped else [tool])
    bare = [{k: v for k, v in t.items() if k != "cache_control"} if isinstance(t, dict) else t for t in flat]
    rendered = [Block("tools", _dump(b), _ttl(t)) for b, t in zip(bare, flat, strict=True)]
    return rendered, flat


def _messages(items: Any, where: str, key: str = "messages") -> list[Any]:
    if not isinstance(items, list) or not items:
        raise ValueError(f'{where}: no "{key}" list')
    return items


def _keyed(body: dict[str, Any], fmt: str) -> dict[str, Any]:
    return {name: body[name] for name in KEYED[fmt] if body.get(name) is not None}


FORMATS = (CHAT, RESPONSES, ANTHROPIC, GEMINI)
# request fields that choose which machine (and so which cache) serves a request, or how long it keeps it
ROUTING_KEYS = ("prompt_cache_key", "user", "safety_identifier", "prompt_cache_retention", "service_tier")
# endpoint paths that name the format outright (a wrapper's URL, or the capture proxy's ``endpoint``)
ENDPOINT_FORMATS = (("/v1/messages", ANTHROPIC), ("/chat/completions", CHAT), ("/responses", RESPONSES),
                    (":generateContent", GEMINI), (":streamGenerateContent", GEMINI))
CHAT_ONLY_ROLES = {"system", "developer", "tool", "function"}
CHAT_ONLY_PARTS = {"image_url", "input_audio", "file"}
CHAT_ONLY_KEYS = ("response_format", "stream_options", "n", "frequency_penalty", "presence_penalty", "logprobs",
                  "reasoning_effort", "max_completion_tokens", "parallel_tool_calls", "seed")
ANTHROPIC_ONLY_KEYS = ("system", "anthropic_version", "cache_control", "stop_sequences", "mcp_servers", "container",
                       "context_management")
SERVER_TOOL_TYPE = re.compile(r"^[a-z_]+_\d{8}$")  # Anthropic's versioned tools: web_search_20250305, memory_20250818


def _evidence(body: dict[str, Any], endpoint: str) -> str | None:
    """The format a body with ``messages`` proves on its own (Anthropic or Chat Completions), or None when
    it could be either: plain text messages, or a ``thinking`` parameter (OpenAI-compatible servers take one too)."""
    for path, fmt in ENDPOINT_FORMATS:
        if path in endpoint:
            return fmt
    if any(key in body for key in ANTHROPIC_ONLY_KEYS):
        return ANTHROPIC
    tools: list[Any] = body["tools"] if isinstance(body.get("tools"), list) else []
    if any(isinstance(t, dict) and ("input_schema" in t or SERVER_TOOL_TYPE.match(str(t.get("type", ""))))
           for t in tools):
        return ANTHROPIC
    if any(isinstance(t, dict) and isinstance(t.get("function"), dict) for t in tools):
        return CHAT
    for message in body["messages"] if isinstance(body["messages"], list) else []:
        if not isinstance(message, dict):
            continue
        if message.get("role") in CHAT_ONLY_ROLES or "tool_calls" in message or "tool_call_id" in message:
            return CHAT
        content = message.get("content")
        kinds = {p.get("type") for p in content if isinstance(p, dict)} if isinstance(content, list) else set()
        if kinds & ANTHROPIC_ONLY_BLOCKS:
            return ANTHROPIC
        if kinds & CHAT_ONLY_PARTS:
            return CHAT
    if any(key in body for key in CHAT_ONLY_KEYS):
        return CHAT
    return None


def _family(body: Any, endpoint: str = "") -> str | None:
    """A body's own format where it shows one: Responses and Gemini by their keys, else `_evidence`."""
    if not isinstance(body, dict):
        raise ValueError(Sentence("doctor_read.expected", got=Sentence("doctor_read.a_json", kind=type(body).__name__)))
    if "messages" in body:
        return _evidence(body, endpoint)
    if "input" in body or "instructions" in body or "previous_response_id" in body:
        return RESPONSES
    if "contents" in body:
        return GEMINI
    raise ValueError(Sentence("doctor_read.expected", got=Sentence("doctor_read.got_keys", keys=sorted(body)[:8])))


def detect(body: Any, endpoint: str = "") -> str:
    """The format of one request body read alone (a body that could be either is read as Chat Completions)."""
    return _family(body, endpoint) or CHAT


def decide(bodies: list[tuple[Any, str]], forced: str | None = None) -> tuple[list[str | None], str | None]:
    """One format per body, decided for the whole log: a log is one agent's traffic, so a body that could be
    either Chat Completions or Anthropic takes the format the other lines show. Returns the formats (None
    where the body cannot be read: `read_body` then names why) and, for a log whose lines really show
    different formats, a sentence saying so (the analysis reports the mix, never a cache break)."""
    if forced is not None:
        return [forced] * len(bodies), None
    own: list[str | None] = []
    readable: list[bool] = []
    for body, endpoint in bodies:
        try:
            own.append(_family(body, endpoint))
            readable.append(True)
        except ValueError:
            own.append(None)
            readable.append(False)
    shown = [f for f in own if f]
    usual = max(sorted(set(shown)), key=shown.count) if shown else CHAT
    messages_default = usual if usual in (CHAT, ANTHROPIC) else CHAT
    formats = [(f or messages_default) if ok else None for f, ok in zip(own, readable, strict=True)]
    seen = sorted(set(shown))
    counts = ", ".join(f"{fmt}: {shown.count(fmt)}" for fmt in seen)
    mixed = None if len(seen) < 2 else Sentence("doctor_read.mixed", counts=counts)
    return formats, mixed


def read_body(body: Any, where: str, endpoint: str = "", fmt: str | None = None) -> Round:
    """One request body as a round, read as ``fmt`` (decided for the log, or forced), else as it looks alone."""
    fmt = fmt or detect(body, endpoint)
    if not isinstance(body, dict):
        raise ValueError(Sentence("doctor_read.expected", got=Sentence("doctor_read.a_json", kind=type(body).__name__)))
    readers = {CHAT: chat_round, ANTHROPIC: anthropic_round, RESPONSES: responses_round, GEMINI: gemini_round}
    round_ = readers[fmt](body, where, endpoint)
    round_.endpoint = endpoint
    round_.routing = {key: body[key] for key in ROUTING_KEYS if body.get(key) is not None}
    metadata = body.get("metadata")
    if isinstance(metadata, dict) and metadata.get("user_id") is not None:
        round_.routing["metadata.user_id"] = metadata["user_id"]
    return round_


def chat_round(body: dict[str, Any], where: str, endpoint: str = "") -> Round:
    messages = []
    for i, m in enumerate(_messages(body.get("messages"), where)):
        if not isinstance(m, dict) or "role" not in m:
            raise ValueError(f'{where}: message {i} has no "role"')
        parts = [Block(name, _dump(m[name])) for name in ("name", "tool_call_id") if m.get(name) is not None]
        thinking = m.get("reasoning_content") or m.get("reasoning")
        parts += [Block("thinking", _dump(thinking))] if thinking else []
        parts += blocks(m.get("content"))
        parts += [Block(name, _dump(m[name])) for name in ("tool_calls", "function_call") if m.get(name) is not None]
        messages.append(Message(str(m["role"]), parts))
    tools, raw = _tools(body.get("tools"), where)
    return Round(messages, tools, where, CHAT, body.get("model"), _keyed(body, CHAT), list(body["messages"]), raw)


def _plain(messages: list[Message]) -> list[dict[str, Any]]:
    """Chat-completions messages with the same text, for replay on a chat endpoint."""
    roles = {"model": "assistant", "developer": "system", "tool": "user"}
    return [{"role": roles.get(m.role, m.role), "content": "".join(
        b.text if b.field == "content" else f"<{b.field}>{b.text}" for b in m.blocks)} for m in messages]


def anthropic_round(body: dict[str, Any], where: str, endpoint: str = "") -> Round:
    system = body.get("system")
    messages = [Message("system", blocks(system))] if system else []
    for i, m in enumerate(_messages(body.get("messages"), where)):
        if not isinstance(m, dict) or "role" not in m:
            raise ValueError(f'{where}: message {i} has no "role"')
        messages.append(Message(str(m["role"]), blocks(m.get("content"))))
    tools, raw = _tools(body.get("tools"), where)
    return Round(messages, tools, where, ANTHROPIC, body.get("model"), _keyed(body, ANTHROPIC), _plain(messages), raw,
                 auto_cache=_ttl(body))


def _response_item(item: Any, where: str, i: int) -> Message:
    if isinstance(item, str):
        return Message("user", [Block("content", item)])
    if not isinstance(item, dict):
        raise ValueError(f'{where}: input item {i} is not an object')
    kind = item.get("type", "message")
    if kind == "message":
        if "role" not in item:
            raise ValueError(f'{where}: input item {i} has no "role"')
        return Message(str(item["role"]), blocks(item.get("content")))
    if kind == "function_call":
        call = {k: item[k] for k in ("call_id", "name", "arguments") if k in item}
        return Message("assistant", [Block("tool_calls", _dump(call))])
    if kind == "function_call_output":
        output = _dump(item.get("output", ""))
        return Message("tool", [Block("content", f"<tool_call_id>{item.get('call_id', '')}{output}")])
    if kind == "reasoning":
        summary = "".join(s.get("text", "") for s in item.get("summary") or [] if isinstance(s, dict))
        return Message("assistant", [Block("thinking", summary + str(item.get("encrypted_content") or ""))])
    return Message(str(item.get("role", kind)), [Block(str(kind), _dump(item))])


def responses_round(body: dict[str, Any], where: str, endpoint: str = "") -> Round:
    messages = [Message("system", blocks(body["instructions"]))] if body.get("instructions") else []
    items = body.get("input")
    items = [items] if isinstance(items, str) else items if isinstance(items, list) else []
    messages += [_response_item(item, where, i) for i, item in enumerate(items)]
    if not messages:
        raise ValueError(f'{where}: a Responses body with neither "instructions" nor "input"')
    tools, raw = _tools(body.get("tools"), where)
    return Round(messages, tools, where, RESPONSES, body.get("model"), _keyed(body, RESPONSES), _plain(messages), raw,
                 server_history=bool(body.get("previous_response_id")))


def gemini_round(body: dict[str, Any], where: str, endpoint: str = "") -> Round:
    system = body.get("systemInstruction") or body.get("system_instruction")
    parts = system.get("parts") if isinstance(system, dict) else system
    messages = [Message("system", blocks(parts))] if system else []
    for i, c in enumerate(_messages(body.get("contents"), where, "contents")):
        if not isinstance(c, dict) or not isinstance(c.get("parts"), list):
            raise ValueError(f'{where}: content {i} has no "parts" list')
        role = "assistant" if c.get("role") == "model" else str(c.get("role", "user"))
        messages.append(Message(role, blocks(c["parts"])))
    tools, raw = _tools(body.get("tools"), where)
    model = body.get("model") or (endpoint.split("models/", 1)[1].split(":", 1)[0] if "models/" in endpoint else None)
    return Round(messages, tools, where, GEMINI, model, {}, _plain(messages), raw)
