"""Breaks that exist only after the chat template: the body kept its prefix, the rendered tokens did not.

Some chat templates rewrite history. Qwen3's drops the reasoning of every assistant turn once a newer
user query follows it; DeepSeek-R1's drops every ``<think>`` block. The agent's body then grows
append-only, yet the prompt the model sees changes inside an earlier turn, and llama.cpp re-processes
everything from there. `check` renders each Chat Completions round through the server's own template
(``/apply-template``, with the round's tools where ``/props`` says the template supports tools),
tokenizes the result (``/tokenize``) and compares it token by token with the round it continues.

How "the chat template rewrote turn k" is decided:

- each round is compared with the round it continues (the analysis' ``compared_with``: in a log of
  several agents, the earlier round sharing the longest prefix, usually the one before);
- the body kept its prefix: that round's stable serialization (`render.serialize`: model,
  keyed parameters, tools, messages) is a prefix of this round's, so messages were only appended;
- the two renderings differ before the end of that round's messages: a difference in its
  generation prompt (the ``<|im_start|>assistant`` that ends a prompt, which the next round may render
  differently) costs a few tokens and is not a rewrite;
- turn k is the message whose rendered region holds the first differing character; a message's region
  runs from the end of the previous message's last located text to the end of its own (its parts,
  found in order in the rendering: reasoning, content, tool calls), and the field is the first of its
  parts that ends after that character.

Only Chat Completions rounds are checked: other formats reach a llama-server only as replayed text.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import httpx

from core.backends import LlamaServerBackend
from core.doctor.causes import common_prefix_length
from core.doctor.model import CHAT, Round, Transcript
from core.doctor.render import serialize


@dataclass
class TemplateRound:
    """One round rendered by the server's template, against the round before."""

    round: int
    tokens: int
    compared_with: int | None = None  # the round it continues (from 1; None for round 1 or after an error)
    common_tokens: int | None = None  # with that round's rendering
    body_kept_prefix: bool = False
    rewrote_message: int | None = None  # turn k, where the template rewrote history
    field: str | None = None
    first_diff_char: int | None = None
    lost_tokens: int = 0  # tokens of the previous rendering this round does not start with
    error: str = ""
    text: str = dataclasses.field(default="", repr=False)

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k != "text"}


@dataclass
class TemplateCheck:
    rounds: list[TemplateRound]
    with_tools: bool
    skipped: str = ""  # why nothing was rendered

    @property
    def rewrites(self) -> list[TemplateRound]:
        return [r for r in self.rounds if r.rewrote_message is not None]


def _text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def _parts(message: dict[str, Any]) -> list[tuple[str, str]]:
    """The texts of one chat message in the order templates write them: reasoning, content, tool calls."""
    parts: list[tuple[str, str]] = []
    reasoning = message.get("reasoning_content") or message.get("reasoning")
    if reasoning:
        parts.append(("reasoning_content", _text(reasoning).strip("\n")))
    content = message.get("content")
    if isinstance(content, list):
        parts += [("content", str(p.get("text"))) for p in content if isinstance(p, dict) and p.get("text")]
    elif content:
        text = _text(content)
        parts += [("content", piece.strip("\n")) for piece in text.split("</think>")] if "</think>" in text else [
            ("content", text)]
    for call in message.get("tool_calls") or []:
        function = call.get("function") if isinstance(call, dict) else None
        if isinstance(function, dict):
            parts.append(("tool_calls", str(function.get("name", ""))))
    return [(name, text.removeprefix("<think>").strip("\n")) for name, text in parts if text.strip()]


def regions(rendered: str, chat: Sequence[dict[str, Any]]) -> list[tuple[int, list[tuple[str, int]]]]:
    """For each message, where its region ends in ``rendered`` and where each located part ends.

    Parts are searched in order from the end of the one before; a part the template dropped is not found
    and takes no room."""
    out: list[tuple[int, list[tuple[str, int]]]] = []
    cursor = 0
    for message in chat:
        located: list[tuple[str, int]] = []
        for name, text in _parts(message):
            at = rendered.find(text, cursor)
            if at >= 0:
                cursor = at + len(text)
                located.append((name, cursor))
        out.append((cursor, located))
    return out


def locate(rendered: str, chat: Sequence[dict[str, Any]], position: int) -> tuple[int | None, str | None]:
    """Turn k and field holding ``position`` of a rendering; (None, None) in the generation prompt after them."""
    for index, (end, located) in enumerate(regions(rendered, chat)):
        if position < end:
            return index, next((name for name, part_end in located if part_end > position), "template")
    return None, None


def _common(a: Sequence[int], b: Sequence[int]) -> int:
    n = min(len(a), len(b))
    return next((i for i in range(n) if a[i] != b[i]), n)


def _body_kept_prefix(previous: Round, current: Round) -> bool:
    old = serialize(previous).text
    return serialize(current).text.startswith(old)


def supports_tools(backend: LlamaServerBackend) -> bool:
    """Whether the server's template renders tools (``/props`` ``chat_template_caps``; builds without it: no)."""
    try:
        return bool(backend.props().get("template_caps", {}).get("supports_tools"))
    except (httpx.HTTPError, ValueError):
        return False


def check(transcript: Transcript, backend: Any, parents: Sequence[int | None] | None = None) -> TemplateCheck:
    """Render every round with the server's template, tokenize it, and find the turns the template rewrote.

    Each round is compared with the round it continues: ``parents`` (numbers from 1, as the analysis'
    ``compared_with``), else the round before it."""
    if not isinstance(backend, LlamaServerBackend):
        return TemplateCheck([], False, "not a llama-server")
    if any(r.format != CHAT for r in transcript.rounds):
        return TemplateCheck([], False, "only Chat Completions rounds are rendered with the server's template")
    with_tools = any(r.raw_tools for r in transcript.rounds) and supports_tools(backend)
    out: list[TemplateRound] = []
    tokens: list[list[int] | None] = []
    for number, round_ in enumerate(transcript.rounds, start=1):
        try:
            text = backend.apply_template(round_.chat, round_.raw_tools if with_tools else None)
            ids = backend.tokenize(text)
        except (httpx.HTTPError, ValueError, KeyError) as exc:
            out.append(TemplateRound(number, 0, error=f"the server could not render round {number}: {exc}"))
            tokens.append(None)
            continue
        row = TemplateRound(number, len(ids), text=text)
        parent = (parents[number - 1] if parents is not None else number - 1) if number > 1 else None
        previous_ids = tokens[parent - 1] if parent else None
        if parent and previous_ids is not None:
            prev_row, prev_round = out[parent - 1], transcript.rounds[parent - 1]
            row.compared_with = parent
            row.common_tokens = _common(previous_ids, ids)
            row.lost_tokens = len(previous_ids) - row.common_tokens
            row.body_kept_prefix = _body_kept_prefix(prev_round, round_)
            if row.lost_tokens and row.body_kept_prefix:
                at = common_prefix_length(prev_row.text, text)
                row.rewrote_message, row.field = locate(prev_row.text, prev_round.chat, at)
                row.first_diff_char = at if row.rewrote_message is not None else None
        out.append(row)
        tokens.append(ids)
    return TemplateCheck(out, with_tools)
