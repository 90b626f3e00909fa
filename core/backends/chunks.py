"""What one OpenAI-style ``delta`` says, in every shape providers send, where the answer starts, and
the state a stream's read loop carries from chunk to chunk (`StreamState`).

Reasoning arrives as ``reasoning_content`` (DeepSeek, Z.ai, vLLM), ``reasoning`` (OpenRouter,
Ollama), ``reasoning_details[]`` (OpenRouter, Snowflake), typed ``thinking`` parts of a list
``content`` (Mistral's reasoning models) or inline in ``content`` between ``<think>`` and
``</think>`` (DeepSeek-R1 on Groq and Together). `ContentSplitter` finds the answer's first token
in the last case, so that TTFT is the first answer token, not the ``<think>``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from core.records import RequestResult

ProgressCallback = Callable[[dict[str, Any]], None]

REASONING = "reasoning"
ANSWER = "answer"
THINK_OPEN, THINK_CLOSE = "<think>", "</think>"

Piece = tuple[str, str, float]  # (REASONING or ANSWER, text, the time it counts as arrived)


def _text_of(parts: Any) -> str:
    """The text of a string or of a list of ``{"type": "text", "text": ...}`` parts."""
    if isinstance(parts, str):
        return parts
    if isinstance(parts, list):
        return "".join(p["text"] for p in parts if isinstance(p, dict) and isinstance(p.get("text"), str))
    return ""


def delta_parts(delta: dict[str, Any]) -> tuple[str, str]:
    """``(reasoning, content)`` text of one delta, whatever shape each comes in."""
    reasoning = delta.get("reasoning_content") or delta.get("reasoning")
    if not isinstance(reasoning, str):
        reasoning = ""
    if not reasoning:  # reasoning_details repeats the `reasoning` text where both are sent
        details = delta.get("reasoning_details")
        for item in details if isinstance(details, list) else []:
            if isinstance(item, dict) and item.get("type") in ("reasoning.text", "reasoning.summary"):
                reasoning += _text_of(item.get("text") or item.get("summary"))
    content = delta.get("content")
    if not isinstance(content, list):
        return reasoning, content if isinstance(content, str) else ""
    text = ""
    for part in content:  # Mistral: [{"type": "thinking", "thinking": [{"type": "text", ...}]}, {"type": "text", ...}]
        if not isinstance(part, dict):
            continue
        if part.get("type") == "thinking":
            reasoning += _text_of(part.get("thinking"))
        elif part.get("type") == "text":
            text += _text_of(part.get("text"))
    return reasoning, text


def _partial_suffix(text: str, tag: str) -> int:
    """Length of the longest end of ``text`` that could be the start of ``tag`` split across chunks."""
    for size in range(min(len(tag) - 1, len(text)), 0, -1):
        if tag.startswith(text[-size:]):
            return size
    return 0


class ContentSplitter:
    """Splits a stream's content into inline reasoning and the answer.

    Content that opens with ``<think>`` is reasoning up to ``</think>``; the answer starts at the
    first non-whitespace text after it. Whitespace before anything else waits to see whether a
    ``<think>`` follows; if none does it is the answer's first token, at the time it arrived.
    """

    def __init__(self) -> None:
        self.inline = False  # a <think> block was seen
        self._state = "start"  # start | thinking | after_think | answer
        self._pending = ""
        self._pending_at: float | None = None

    def feed(self, text: str, now: float) -> list[Piece]:
        if self._state == "answer":
            return [(ANSWER, text, now)]
        if self._pending_at is None:
            self._pending_at = now
        text, self._pending = self._pending + text, ""
        if self._state == "thinking":
            return self._thinking(text, now)
        stripped = text.lstrip()
        if self._state == "start" and stripped.startswith(THINK_OPEN):
            self.inline, self._state, self._pending_at = True, "thinking", None
            return [(REASONING, "", now), *self._thinking(stripped[len(THINK_OPEN):], now)]
        if not stripped or (self._state == "start" and THINK_OPEN.startswith(stripped)):
            self._pending = text  # only whitespace so far, or what may be a <think> split in two
            return []
        at = self._pending_at if self._state == "start" else now
        self._state, self._pending_at = "answer", None
        return [(ANSWER, text, at)]

    def _thinking(self, text: str, now: float) -> list[Piece]:
        end = text.find(THINK_CLOSE)
        if end < 0:
            keep = _partial_suffix(text, THINK_CLOSE)
            self._pending = text[len(text) - keep:]
            return [(REASONING, text[: len(text) - keep], now)]
        self._state = "after_think"
        rest = text[end + len(THINK_CLOSE):]
        return [(REASONING, text[:end], now), *(self.feed(rest, now) if rest else [])]

    def flush(self) -> list[Piece]:
        """What is still held when the stream ends (whitespace, an unfinished tag)."""
        if not self._pending:
            return []
        kind = REASONING if self._state == "thinking" else ANSWER
        at = self._pending_at if self._pending_at is not None else 0.0
        text, self._pending = self._pending, ""
        return [(kind, text, at)]


@dataclass
class StreamState:
    """What one request's read loop carries from chunk to chunk."""

    result: RequestResult
    on_progress: ProgressCallback | None = None
    chunks: int = 0  # data payloads read so far
    answer_chunks: int = 0  # payloads that added answer text (not reasoning): each is at least one token
    done: bool = False  # the stream said it is complete ([DONE], Anthropic's message_stop)
    event: str = ""  # the current SSE ``event:`` name
    content: ContentSplitter = field(default_factory=ContentSplitter)

    def add(self, pieces: list[Piece]) -> None:
        """Append reasoning and answer text, stamping the first of each."""
        result = self.result
        for kind, text, at in pieces:
            if kind == ANSWER:
                if result.ttft_s is None and text:
                    result.ttft_s = at
                result.text += text
            else:
                if result.first_reasoning_s is None:
                    result.first_reasoning_s = at
                result.reasoning_text += text
        result.reasoning_inline = self.content.inline

    def reasoning(self, text: str, now: float) -> None:
        self.add([(REASONING, text, now)])

    def answer(self, text: str, now: float) -> None:
        pieces = self.content.feed(text, now)
        if any(kind == ANSWER and piece for kind, piece, _ in pieces):
            self.answer_chunks += 1
        self.add(pieces)
