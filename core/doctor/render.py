"""Rendering a round to the text a prefix cache sees, in its provider's order, with every part located.

The stable serialization: ``[model NAME]``, then for Anthropic tools → system → keyed parameters →
messages (its documented cache order), for the others keyed parameters → tools → messages. Each tool
is its JSON; each message a ``[index role]`` header, then its blocks (``<field>`` before any that is
not plain content). With a llama-server, chat-completions rounds without tools are rendered with its
chat template instead (`render_with_template`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from core.doctor.model import ANTHROPIC, CHAT, Round


@dataclass
class Span:
    start: int
    end: int
    message_index: int | None  # None: model, parameters, tools or template text
    field: str
    block: int = 0  # the block's number within its message (or tool list)


@dataclass
class Breakpoint:
    """An Anthropic ``cache_control``: where its cached prefix ends, in characters and in blocks."""

    end: int
    blocks: int
    ttl: str
    where: str  # "tools", "system" or "message N"


@dataclass
class Rendered:
    text: str
    spans: list[Span]
    how: str
    breakpoints: list[Breakpoint] = field(default_factory=list)
    message_starts: list[int] = field(default_factory=list)
    block_ends: list[int] = field(default_factory=list)  # where each block (tool, content part) ends, in order

    def locate(self, position: int) -> Span | None:
        for span in self.spans:
            if span.start <= position < span.end:
                return span
        return self.spans[-1] if self.spans and position >= self.spans[-1].end else None

    def value(self, span: Span | None) -> str:
        """The whole text of the block a span belongs to."""
        if span is None:
            return ""
        return "".join(self.text[s.start:s.end] for s in self.spans
                       if (s.message_index, s.field, s.block) == (span.message_index, span.field, span.block))


class _Writer:
    def __init__(self) -> None:
        self.parts: list[str] = []
        self.spans: list[Span] = []
        self.position = 0
        self.blocks = 0
        self.breakpoints: list[Breakpoint] = []
        self.block_ends: list[int] = []

    def add(self, text: str, message_index: int | None, field_name: str, block: int = 0) -> None:
        self.parts.append(text)
        self.spans.append(Span(self.position, self.position + len(text), message_index, field_name, block))
        self.position += len(text)

    def mark(self, ttl: str | None, where: str) -> None:
        self.blocks += 1
        self.block_ends.append(self.position)
        if ttl:
            self.breakpoints.append(Breakpoint(self.position, self.blocks, ttl, where))


def serialize(round_: Round) -> Rendered:
    """The documented stable serialization used when no chat template is available."""
    out = _Writer()
    starts: list[int] = []
    if round_.model:
        out.add(f"[model {round_.model}]\n", None, "model")

    def keyed() -> None:
        if round_.keyed:
            out.add(f"[params {json.dumps(round_.keyed, sort_keys=True, ensure_ascii=False)}]\n", None, "params")

    def tools() -> None:
        if round_.tools:
            out.add("[tools]\n", None, "tools")
        for index, tool in enumerate(round_.tools):
            out.add(tool.text + "\n", None, "tools", index)
            out.mark(tool.breakpoint, "tools")

    def message(index: int) -> None:
        item = round_.messages[index]
        starts.append(out.position)
        out.add(f"[{index} {item.role}]\n", index, "role")
        for number, block in enumerate(item.blocks):
            if block.field != "content":
                out.add(f"<{block.field}>", index, block.field, number)
            out.add(block.text, index, block.field, number)
            out.mark(block.breakpoint, "system" if item.role == "system" and index == 0 else f"message {index}")
        out.add("\n", index, "role")

    if round_.format == ANTHROPIC:
        tools()
        has_system = bool(round_.messages) and round_.messages[0].role == "system"
        if has_system:
            message(0)
        keyed()
        for index in range(1 if has_system else 0, len(round_.messages)):
            message(index)
    else:
        keyed()
        tools()
        for index in range(len(round_.messages)):
            message(index)
    if round_.auto_cache and out.blocks:
        out.breakpoints.append(Breakpoint(out.position, out.blocks, round_.auto_cache, "automatic"))
    return Rendered("".join(out.parts), out.spans, "stable serialization", out.breakpoints, starts, out.block_ends)


def can_use_template(round_: Round) -> bool:
    return round_.format == CHAT and not round_.tools and not round_.keyed


def render_with_template(round_: Round, backend: Any) -> Rendered:
    """The server's chat template; each block located by searching its text in order."""
    text = backend.apply_template(round_.chat)
    spans: list[Span] = []
    starts: list[int] = []
    cursor = 0
    for index, message in enumerate(round_.messages):
        starts.append(cursor)
        for number, block in enumerate(message.blocks):
            at = text.find(block.text, cursor) if block.text else -1
            if at < 0:
                continue
            if at > cursor:
                spans.append(Span(cursor, at, index, "role"))
            spans.append(Span(at, at + len(block.text), index, block.field, number))
            cursor = at + len(block.text)
    if cursor < len(text):
        spans.append(Span(cursor, len(text), None, "template"))
    return Rendered(text, spans, "chat template (/apply-template)", [], starts)
