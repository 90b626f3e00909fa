"""What every input format is read into: rounds of messages made of blocks, in the order the model sees them."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from core.words import Sentence

# input formats, as named to the user
CHAT = "chat completions"
RESPONSES = "responses"
ANTHROPIC = "anthropic messages"
GEMINI = "gemini generateContent"
TEXT = "text"


class TranscriptError(ValueError):
    """The input cannot be read as rounds at all; the message says why."""


def json_problem(exc: json.JSONDecodeError, unit: str = "column") -> str:
    """A JSON error in words with where it is: its column, or (``unit="character"``, for JSON held in a string) its
    character ("Unterminated string starting at" already ends in "at"); a `Sentence`, the parser's own words quoted."""
    at = exc.colno if unit == "column" else exc.pos + 1
    said = Sentence("doctor_read.unit_column") if unit == "column" else Sentence("doctor_read.unit_character")
    return Sentence("doctor_read.json_problem", msg=exc.msg.removesuffix(" at"), at=at, unit=said)


@dataclass
class Block:
    """One part of a message as it reaches the model. ``field`` names it in findings (content, tool_calls,
    thinking, image, attachment, tool_call_id, name); ``breakpoint`` is an Anthropic ``cache_control`` TTL."""

    field: str
    text: str
    breakpoint: str | None = None


@dataclass
class Message:
    role: str
    blocks: list[Block]

    def text(self, fields: tuple[str, ...] | None = None) -> str:
        return "".join(b.text for b in self.blocks if fields is None or b.field in fields)

    def key(self) -> str:
        return json.dumps([self.role, [(b.field, b.text) for b in self.blocks]])


@dataclass
class Measured:
    """A provider's own account of one request: prompt tokens (cached ones included) and cached tokens."""

    prompt_tokens: int | None
    cached_tokens: int
    source: str = ""  # the usage field it came from


@dataclass
class ProviderDiagnosis:
    """The provider's own verdict on a cache miss (Anthropic ``diagnostics``, OpenAI ``prompt_cache_diagnostics``):
    ``reason`` as the provider names it, ``section`` what the doctor compares it with (model, system, tools,
    messages, params, none, or inconclusive), the tokens it says were missed, and the field it came from."""

    reason: str
    section: str
    missed_tokens: int | None
    source: str


@dataclass
class Round:
    """One request. ``messages`` start with the system prompt (``role`` system) in every format; ``keyed``
    holds the request parameters the provider's cache is keyed on, rendered before the messages."""

    messages: list[Message]
    tools: list[Block] = field(default_factory=list)
    source: str = ""
    format: str = TEXT
    model: str | None = None
    keyed: dict[str, Any] = field(default_factory=dict)
    chat: list[dict[str, Any]] = field(default_factory=list)  # chat-completions messages, for replay and templates
    raw_tools: list[Any] | None = None
    measured: Measured | None = None
    time: datetime | None = None
    server_history: bool = False  # a Responses previous_response_id: the history is not in the body
    auto_cache: str | None = None  # Anthropic top-level cache_control TTL (automatic caching)
    endpoint: str = ""  # the wrapper's URL or path, where the log has one (it names the provider)
    routing: dict[str, Any] = field(default_factory=dict)  # what routes a request to a cache: user, cache key
    diagnosis: ProviderDiagnosis | None = None  # the provider's own cache diagnostics, where the response has them
    served_by: str | None = None  # the provider the response's own marks name (`rules.served_by`)
    gap: str | None = None  # what the input does not hold of this round (a trace's cut or redacted prompt): no verdict

    def tool_names(self) -> list[str]:
        return [tool_name(t) for t in self.raw_tools or []]


@dataclass
class Transcript:
    rounds: list[Round]
    errors: list[str] = field(default_factory=list)
    kind: str = "jsonl"  # jsonl | json | files | system_prompt | simulated | trace
    notes: list[str] = field(default_factory=list)
    mixed: str | None = None  # the log's lines really show more than one format: a sentence saying so
    # what a round that was read could not use ("line 2: usage...cached_tokens = '1152' (not a token count)"):
    # named, never counted as a line that could not be read
    unused: list[str] = field(default_factory=list)

    @property
    def formats(self) -> list[str]:
        return sorted({r.format for r in self.rounds})


def tool_name(tool: Any) -> str:
    """A tool's name in any format (chat's nested ``function``, or flat), else its JSON."""
    if isinstance(tool, dict):
        function = tool.get("function")
        inner = function if isinstance(function, dict) else tool
        if "name" in inner:
            return str(inner["name"])
    return json.dumps(tool, sort_keys=True)


def text_round(role: str, text: str, source: str) -> Round:
    """A whole prompt given as plain text (one file per round, or a system prompt)."""
    return Round([Message(role, [Block("content", text)])], source=source, chat=[{"role": role, "content": text}])
