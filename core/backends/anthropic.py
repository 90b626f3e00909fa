"""Anthropic's Messages API (``POST /v1/messages``, ``stream: true``), with explicit prompt caching.

The shared `ChatRequest` (OpenAI-style messages, the system prompt first) is converted here, and
``cache_control`` breakpoints are placed the way Anthropic requires: on the stable system block
and on the last message. Experiments stay backend-neutral: with *append only* the next round
reads everything up to the previous round's last message from the cache; when the system prompt
changes every round (*timestamp first*) every round writes it again.

Events: ``message_start`` (usage), ``content_block_start/delta/stop`` (``text_delta``;
``thinking_delta`` is reasoning), ``message_delta`` (stop reason, final usage), ``message_stop``,
``ping`` and ``error``. Usage: ``input_tokens`` is the uncached part only; ``cache_read_input_tokens``
were reused, ``cache_creation_input_tokens`` were written (billed at 1.25x). A count the stream
does not carry stays ``None``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from core.backends.base import ChatRequest, StreamingBackend, apply_usage
from core.backends.chunks import StreamState
from core.backends.errors import error_text
from core.backends.usage import read_usage
from core.records import RequestResult

API_VERSION = "2023-06-01"
EPHEMERAL = {"type": "ephemeral"}


def _text_blocks(content: Any) -> list[dict[str, Any]]:
    """A message's content as Anthropic content blocks (a string becomes one text block). Empty text
    blocks are dropped: the API refuses them (an empty answer, say, in an earlier round)."""
    if isinstance(content, list):
        blocks = [dict(block) for block in content]
    else:
        blocks = [{"type": "text", "text": str(content or "")}]
    return [b for b in blocks if not (b.get("type") == "text" and not str(b.get("text", "")).strip())]


SYSTEM_ROLES = ("system", "developer")  # OpenAI's "developer" is Anthropic's system prompt
ROLES = {"assistant": "assistant"}  # every other chat role ("user", "tool", ...) speaks as the user


def messages_payload(messages: list[dict[str, Any]]) -> dict[str, Any]:
    """``system`` and ``messages`` in Messages format, with cache breakpoints on the system block and
    on the last message. Roles Anthropic does not know are mapped: ``developer`` to the system prompt,
    ``tool`` (and any other) to the user; a message left with no content keeps a placeholder."""
    system = [m for m in messages if m.get("role") in SYSTEM_ROLES]
    rest: list[dict[str, Any]] = [
        {"role": ROLES.get(str(m.get("role")), "user"),
         "content": _text_blocks(m.get("content", "")) or [{"type": "text", "text": "(empty)"}]}
        for m in messages if m.get("role") not in SYSTEM_ROLES]
    body: dict[str, Any] = {"messages": rest}
    blocks = [block for m in system for block in _text_blocks(m.get("content", ""))]
    if blocks:
        blocks[-1]["cache_control"] = EPHEMERAL
        body["system"] = blocks
    if rest:
        rest[-1]["content"][-1]["cache_control"] = EPHEMERAL
    return body


class AnthropicBackend(StreamingBackend):
    """Claude through ``/v1/messages``; the cache is read from the usage in ``message_start``/``message_delta``."""

    endpoint = "/messages"

    def auth_headers(self, api_key: str | None) -> dict[str, str]:
        headers = {"anthropic-version": API_VERSION}
        if api_key:
            headers["x-api-key"] = api_key
        return headers

    def payload(self, request: ChatRequest) -> dict[str, Any]:
        body: dict[str, Any] = {"model": self.model, "max_tokens": request.max_tokens,
                                "temperature": request.temperature, "stream": True,
                                **messages_payload(request.messages)}
        body.update(request.extra)
        return body

    def read_chunk(self, chunk: dict[str, Any], state: StreamState, now: float) -> None:
        result = state.result
        kind = chunk.get("type") or state.event
        if kind == "message_start":
            message = chunk.get("message")
            usage = message.get("usage") if isinstance(message, Mapping) else None
            self.read_usage(usage if isinstance(usage, Mapping) else {}, result, "message_start.usage")
        elif kind == "content_block_start":
            block = chunk.get("content_block") or {}
            self._read_text(block.get("type"), block.get("thinking") or block.get("text") or "", state, now)
        elif kind == "content_block_delta":
            delta = chunk.get("delta") or {}
            self._read_text(delta.get("type"), delta.get("thinking") or delta.get("text") or "", state, now)
        elif kind == "message_delta":
            stop = (chunk.get("delta") or {}).get("stop_reason")
            if stop:
                result.finish_reason = stop
            if isinstance(chunk.get("usage"), dict):
                self.read_usage(chunk["usage"], result, "message_delta.usage")
        elif kind == "message_stop":
            state.done = True
        elif kind == "error":
            result.error = f"The server reported an error mid-stream at chunk {state.chunks}: {error_text(chunk)}"

    @staticmethod
    def _read_text(block_type: Any, text: str, state: StreamState, now: float) -> None:
        if not text:
            return
        if block_type in ("thinking", "thinking_delta"):
            state.reasoning(text, now)
        elif block_type in ("text", "text_delta"):
            state.answer(text, now)
        else:
            return  # tool input, signatures, server tool results: not text anyone reads as it streams
        state.result.chunk_times_s.append(now)

    def read_usage(self, usage: Mapping[str, Any], result: RequestResult, source: str) -> None:
        """Prompt tokens = uncached input + cache reads + cache writes; reused = reads; recomputed = the rest
        (`core.backends.usage`). A ``message_delta`` of older API versions carries ``output_tokens`` only."""
        counts = read_usage(usage, source)
        if counts.prompt_tokens is None:
            result.unreadable_fields.extend(counts.unreadable)
            if counts.completion_tokens is not None:
                result.completion_tokens = counts.completion_tokens
            return
        apply_usage(result, counts, source)
        result.cached_tokens, result.recomputed_tokens = counts.cached_tokens, counts.recomputed_tokens
