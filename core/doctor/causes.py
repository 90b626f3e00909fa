"""Why two consecutive rounds first differ where they do: one cause per break, most specific first."""

from __future__ import annotations

import json
import re
from typing import Any

from core.doctor.model import Round
from core.doctor.render import Rendered, Span

MODEL_CHANGED = "model_changed"
PARAMS_CHANGED = "params_changed"
TOOLS_CHANGED = "tools_changed"
TOOL_ORDER = "tool_order"
JSON_KEY_ORDER = "json_key_order"
WHITESPACE = "whitespace"
THINKING_STRIPPED = "thinking_stripped"
IMAGE_REENCODED = "image_reencoded"
TIMESTAMP = "timestamp"
RANDOM_ID = "random_id"
HISTORY_TRUNCATED = "history_truncated"
HISTORY_EDITED = "history_edited"
SYSTEM_PROMPT_CHANGED = "system_prompt_changed"
SERVER_HISTORY = "server_history"
TEMPLATE_REWROTE = "template_rewrote"  # found by `core.doctor.template` on a llama-server, not from the body
END_OF_PROMPT = "end_of_prompt"
NEW_CONVERSATION = "new_conversation"  # another agent's or task's request: its own cache, not a break
LAST_MESSAGE_REPLACED = "last_message_replaced"  # a step that rebuilds the conversation's last message: not a break
VARYING_PREFIX = "varying_prefix"  # another conversation from the same prompt, lost early to a value that changes
HISTORY_COMPACTED = "history_compacted"  # the history replaced by a summary (a compaction item), on purpose
FORMAT_CHANGED = "format_changed"  # the log switches format between two rounds: a mix, not a cache break
THINKING_DROPPED_BY_PROVIDER = "thinking_dropped_by_provider"  # the provider drops earlier thinking itself
OTHER = "other"
NONE = "none"
CAUSES = (MODEL_CHANGED, PARAMS_CHANGED, TOOLS_CHANGED, TOOL_ORDER, JSON_KEY_ORDER, WHITESPACE, THINKING_STRIPPED,
          IMAGE_REENCODED, TIMESTAMP, RANDOM_ID, HISTORY_TRUNCATED, HISTORY_EDITED, SYSTEM_PROMPT_CHANGED,
          TEMPLATE_REWROTE, VARYING_PREFIX, HISTORY_COMPACTED, OTHER)

TIMESTAMP_PATTERN = re.compile(
    r"\d{4}-\d{2}-\d{2}[T ]?\d{0,2}:?\d{0,2}:?\d{0,2}(?:\.\d+)?(?:Z|[+-]\d{2}:?\d{2})?"
    r"|\d{1,2}:\d{2}(?::\d{2})?(?:\.\d+)?\s*(?:[AaPp][Mm])?"
    r"|\b1[5-9]\d{8}(?:\d{3})?\b"
    r"|\b(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun)[a-z]*,? \d{1,2} [A-Z][a-z]+ \d{4}"
    r"|\b\d{1,2}/\d{1,2}/\d{2,4}\b")
RANDOM_ID_PATTERN = re.compile(
    r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"
    r"|\b[0-9a-fA-F]{12,}\b|\b(?=[A-Za-z0-9_-]*\d)(?=[A-Za-z0-9_-]*[A-Za-z])[A-Za-z0-9_-]{16,}\b")
SYSTEM_ROLES = ("system", "developer")
COMPACTION = "compaction"  # the block field of a Responses compaction item or an Anthropic compaction block
HEAD_FIELDS = ("model", "params", "tools")  # parts rendered before the messages: a change there is never a tail edit
THINK_BLOCK = re.compile(r"<think(?:ing)?>.*?</think(?:ing)?>\s*", re.S)


def common_prefix_length(a: str, b: str) -> int:
    """Length of the common prefix: equal slices are compared in C, halving the range where they differ, so a
    long prompt costs a few comparisons of memory, never a Python loop over its characters."""
    limit = min(len(a), len(b))
    if a[:limit] == b[:limit]:
        return limit
    lo, hi = 0, limit  # a[:lo] == b[:lo], a[:hi] != b[:hi]
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if a[lo:mid] == b[lo:mid]:
            lo = mid
        else:
            hi = mid
    return lo


def _diff_window(old: str, new: str, radius: int = 24) -> tuple[str, str, int]:
    """The changed middle of two strings, widened by ``radius`` characters on each side."""
    head = common_prefix_length(old, new)
    tail = common_prefix_length(old[head:][::-1], new[head:][::-1])
    lo = max(0, head - radius)
    return old[lo:len(old) - tail + radius], new[lo:len(new) - tail + radius], head - lo


def _matches_at(pattern: re.Pattern[str], text: str, position: int) -> bool:
    return any(m.start() <= position <= m.end() for m in pattern.finditer(text))


def _canonical(value: str) -> Any:
    try:
        return json.dumps(json.loads(value), sort_keys=True)
    except (json.JSONDecodeError, TypeError):
        return None


def _without_thinking(round_: Round, index: int) -> str:
    message = round_.messages[index]
    return THINK_BLOCK.sub("", message.text(("content", "tool_calls"))).strip()


def _tools_cause(prev: Round, cur: Round) -> str:
    old, new = prev.tool_names(), cur.tool_names()
    if sorted(old) != sorted(new):
        return TOOLS_CHANGED
    if old != new:
        return TOOL_ORDER
    if json.dumps(prev.raw_tools, sort_keys=True) == json.dumps(cur.raw_tools, sort_keys=True):
        return JSON_KEY_ORDER
    return TOOLS_CHANGED


def compacted(prev: Round, cur: Round, index: int = 0) -> bool:
    """Whether the round holds, from message ``index`` on, a compaction (a summary the provider wrote to replace
    the history) that the previous round did not: the conversation compacted its history on purpose."""
    old = {b.text for m in prev.messages for b in m.blocks if b.field == COMPACTION}
    return any(b.field == COMPACTION and b.text not in old for m in cur.messages[index:] for b in m.blocks)


def classify(prev: Round, cur: Round, old: Rendered, new: Rendered, span_prev: Span | None,
             span_cur: Span | None) -> str:
    """Why two rounds differ where they first differ."""
    field_name = span_cur.field if span_cur else span_prev.field if span_prev else ""
    fields = {field_name, span_prev.field if span_prev else ""}
    if "model" in fields:
        return MODEL_CHANGED
    if "params" in fields:
        return PARAMS_CHANGED
    if "tools" in fields:
        return _tools_cause(prev, cur)
    index = span_cur.message_index if span_cur else None
    if index is None or index >= len(prev.messages):
        return HISTORY_TRUNCATED if index is None and len(cur.messages) < len(prev.messages) else OTHER
    if index >= len(cur.messages):
        return HISTORY_TRUNCATED
    if compacted(prev, cur, index):
        return HISTORY_COMPACTED
    role = prev.messages[index].role
    # a message dropped or summarised: later old messages reappear further up in the new round
    later_old = {m.key() for m in prev.messages[index + 1:]}
    if role not in SYSTEM_ROLES and any(m.key() in later_old for m in cur.messages[:index + 1]):
        return HISTORY_TRUNCATED
    if role in ("assistant", "model") and (fields & {"thinking"} or "<think" in prev.messages[index].text()):
        if _without_thinking(prev, index) == _without_thinking(cur, index):
            return THINKING_STRIPPED
    if fields & {"image", "attachment"} and span_prev and span_cur and span_prev.field == span_cur.field:
        return IMAGE_REENCODED
    old_value, new_value = old.value(span_prev), new.value(span_cur)
    canonical_old = _canonical(old_value)
    if canonical_old is not None and canonical_old == _canonical(new_value) and old_value != new_value:
        return JSON_KEY_ORDER
    if old_value != new_value and old_value.split() == new_value.split():
        return WHITESPACE
    old_win, new_win, at = _diff_window(old_value, new_value)
    if _matches_at(TIMESTAMP_PATTERN, old_win, at) and _matches_at(TIMESTAMP_PATTERN, new_win, at):
        return TIMESTAMP
    if _matches_at(RANDOM_ID_PATTERN, old_win, at) and _matches_at(RANDOM_ID_PATTERN, new_win, at):
        return RANDOM_ID
    if role in SYSTEM_ROLES and index == 0:
        return SYSTEM_PROMPT_CHANGED
    if len(cur.messages) < len(prev.messages):
        return HISTORY_TRUNCATED
    return HISTORY_EDITED
