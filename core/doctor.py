"""Cache doctor: find what breaks the prefix cache in the prompts an agent really sent.

Input is one request body per round (``messages``, optional ``tools``), from a JSONL log, a JSON
array, or one text file per round. Each round is rendered to the text the model sees: with the
local server's chat template when one is given (`LlamaServerBackend.apply_template`), otherwise
with `serialize`, a stable documented serialization (tools as JSON first, then each message as a
``[index role]`` header and its content). Consecutive rounds are compared: the longest common
prefix is what a prefix cache can reuse; the first difference is located (message, field) and its
cause classified.

A round *breaks the cache* when the first difference lies before the previous round's final
message, i.e. it loses prefix the previous round had built. A change inside the previous round's
final message (dynamic content at the very end) costs only that message and is not a breaker.
Rounds given as whole prompts (one text file each) break when more than `END_TOLERANCE_TOKENS`
of the previous prompt are lost.
"""

from __future__ import annotations

import html
import json
import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from core.prompts import (
    Conversation,
    DocumentError,
    EstimatingTokenCounter,
    TokenCounter,
    read_document,
)

MAX_DOCTOR_BYTES = 50 * 1024 * 1024
REPLAY_ANSWER_TOKENS = 8  # a replayed round only needs its prefill measured
END_TOLERANCE_TOKENS = 64  # a one-message round may change this much at its very end without "breaking"

# causes, most specific first
TOOL_ORDER = "tool_order"
JSON_KEY_ORDER = "json_key_order"
WHITESPACE = "whitespace"
TIMESTAMP = "timestamp"
RANDOM_ID = "random_id"
HISTORY_TRUNCATED = "history_truncated"
HISTORY_EDITED = "history_edited"
SYSTEM_PROMPT_CHANGED = "system_prompt_changed"
END_OF_PROMPT = "end_of_prompt"
OTHER = "other"
NONE = "none"

_TIMESTAMP = re.compile(
    r"\d{4}-\d{2}-\d{2}[T ]?\d{0,2}:?\d{0,2}:?\d{0,2}(?:\.\d+)?(?:Z|[+-]\d{2}:?\d{2})?"
    r"|\d{1,2}:\d{2}(?::\d{2})?(?:\.\d+)?\s*(?:[AaPp][Mm])?"
    r"|\b1[5-9]\d{8}(?:\d{3})?\b"
    r"|\b(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun)[a-z]*,? \d{1,2} [A-Z][a-z]+ \d{4}"
    r"|\b\d{1,2}/\d{1,2}/\d{2,4}\b")
_RANDOM_ID = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"
                        r"|\b[0-9a-fA-F]{12,}\b|\b(?=[A-Za-z0-9_-]*\d)(?=[A-Za-z0-9_-]*[A-Za-z])[A-Za-z0-9_-]{16,}\b")


class TranscriptError(ValueError):
    """The input cannot be read as rounds at all; the message says why."""


@dataclass
class Round:
    messages: list[dict[str, Any]]
    tools: list[Any] | None = None
    source: str = ""


@dataclass
class Transcript:
    rounds: list[Round]
    errors: list[str] = field(default_factory=list)
    kind: str = "jsonl"  # jsonl | json | files | system_prompt


# -- reading input -----------------------------------------------------------------------------------
def _round_from_body(body: Any, where: str) -> Round:
    if not isinstance(body, dict):
        raise ValueError(f"{where}: expected a JSON object with \"messages\", got {type(body).__name__}")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise ValueError(f"{where}: no \"messages\" list")
    for i, message in enumerate(messages):
        if not isinstance(message, dict) or "role" not in message:
            raise ValueError(f"{where}: message {i} has no \"role\"")
    tools = body.get("tools")
    if tools is not None and not isinstance(tools, list):
        raise ValueError(f"{where}: \"tools\" is not a list")
    return Round(messages, tools, where)


def parse_jsonl(text: str, name: str = "input") -> Transcript:
    rounds, errors = [], []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            rounds.append(_round_from_body(json.loads(line), f"{name} line {number}"))
        except json.JSONDecodeError as exc:
            errors.append(f"{name} line {number}: not valid JSON ({exc.msg} at column {exc.colno})")
        except ValueError as exc:
            errors.append(str(exc))
    return Transcript(rounds, errors, "jsonl")


def parse_json_array(text: str, name: str = "input") -> Transcript:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise TranscriptError(f"{name} is not valid JSON ({exc.msg} at line {exc.lineno}, column {exc.colno}).") from None
    if isinstance(data, dict) and isinstance(data.get("requests"), list):
        data = data["requests"]
    if not isinstance(data, list):
        raise TranscriptError(f"{name}: expected a JSON array of request bodies.")
    rounds, errors = [], []
    for index, body in enumerate(data):
        try:
            rounds.append(_round_from_body(body, f"{name} item {index + 1}"))
        except ValueError as exc:
            errors.append(str(exc))
    return Transcript(rounds, errors, "json")


def load_inputs(files: Sequence[tuple[str, bytes]], max_bytes: int = MAX_DOCTOR_BYTES) -> Transcript:
    """Read uploaded or named files: one JSONL/JSON log, several text files (one per round, in name
    order), or one plain text file (a system prompt to compare strategies with)."""
    if not files:
        raise TranscriptError("No input: upload a JSONL log, a JSON array, or text files.")
    if sum(len(data) for _, data in files) > max_bytes:
        raise TranscriptError(f"The input is larger than {max_bytes / 1e6:.0f} MB.")
    texts = []
    for name, data in sorted(files, key=lambda f: f[0]):
        try:
            texts.append((name, read_document(data, name, max_bytes)))
        except DocumentError as exc:
            raise TranscriptError(str(exc)) from None
    if len(texts) > 1:
        return Transcript([Round([{"role": "user", "content": text}], None, name) for name, text in texts], [], "files")
    name, text = texts[0]
    stripped = text.lstrip()
    if stripped.startswith("["):
        return parse_json_array(text, name)
    if stripped.startswith("{"):
        transcript = parse_jsonl(text, name)
        if transcript.rounds or not name.endswith(".json"):
            return transcript
        return parse_json_array(text, name)
    return Transcript([Round([{"role": "system", "content": text}], None, name)], [], "system_prompt")


def load_paths(paths: Sequence[Path]) -> Transcript:
    return load_inputs([(p.name, p.read_bytes()) for p in paths])


# -- rendering ---------------------------------------------------------------------------------------
@dataclass
class Span:
    start: int
    end: int
    message_index: int | None  # None: tools or template text
    field: str


@dataclass
class Rendered:
    text: str
    spans: list[Span]
    how: str

    def locate(self, position: int) -> Span | None:
        for span in self.spans:
            if span.start <= position < span.end:
                return span
        return self.spans[-1] if self.spans and position >= self.spans[-1].end else None


def _content_text(content: Any) -> str:
    return content if isinstance(content, str) else json.dumps(content, ensure_ascii=False)


def _message_fields(message: dict[str, Any]) -> list[tuple[str, str]]:
    fields = [("content", _content_text(message.get("content") or ""))]
    for name in ("name", "tool_call_id", "tool_calls", "function_call"):
        if message.get(name) is not None:
            fields.append((name, _content_text(message[name])))
    return fields


def serialize(round_: Round) -> Rendered:
    """The documented stable serialization used when no chat template is available."""
    parts: list[str] = []
    spans: list[Span] = []
    position = 0

    def add(text: str, message_index: int | None, field_name: str) -> None:
        nonlocal position
        parts.append(text)
        spans.append(Span(position, position + len(text), message_index, field_name))
        position += len(text)

    if round_.tools:
        add("[tools]\n", None, "tools")
        add(json.dumps(round_.tools, ensure_ascii=False), None, "tools")
        add("\n", None, "tools")
    for index, message in enumerate(round_.messages):
        add(f"[{index} {message.get('role')}]\n", index, "role")
        for name, value in _message_fields(message):
            if name != "content":
                add(f"<{name}>", index, name)
            add(value, index, name)
        add("\n", index, "role")
    return Rendered("".join(parts), spans, "stable serialization")


def render_with_template(round_: Round, backend: Any) -> Rendered:
    """The server's chat template; message fields located by searching their text in order."""
    text = backend.apply_template(round_.messages)
    spans: list[Span] = []
    cursor = 0
    for index, message in enumerate(round_.messages):
        for name, value in _message_fields(message):
            at = text.find(value, cursor) if value else -1
            if at < 0:
                continue
            if at > cursor:
                spans.append(Span(cursor, at, index, "role"))
            spans.append(Span(at, at + len(value), index, name))
            cursor = at + len(value)
    if cursor < len(text):
        spans.append(Span(cursor, len(text), None, "template"))
    return Rendered(text, spans, "chat template (/apply-template)")


# -- comparing ---------------------------------------------------------------------------------------
def common_prefix_length(a: str, b: str, block: int = 4096) -> int:
    """Length of the common prefix, comparing blocks in C before characters in Python."""
    limit = min(len(a), len(b))
    start = 0
    while start < limit and a[start:start + block] == b[start:start + block]:
        start += block
    end = min(start + block, limit)
    while start < end and a[start] == b[start]:
        start += 1
    return min(start, limit)


def _field_value(round_: Round, span: Span | None) -> str:
    if span is None:
        return ""
    if span.message_index is None:
        return json.dumps(round_.tools, ensure_ascii=False) if span.field == "tools" and round_.tools else ""
    if span.message_index >= len(round_.messages):
        return ""
    message = round_.messages[span.message_index]
    return dict(_message_fields(message)).get(span.field, str(message.get("role", "")))


def _diff_window(old: str, new: str, radius: int = 24) -> tuple[str, str, int, int]:
    """The changed middle of two strings, widened by ``radius`` characters on each side."""
    head = common_prefix_length(old, new)
    tail = common_prefix_length(old[head:][::-1], new[head:][::-1])
    lo = max(0, head - radius)
    return old[lo:len(old) - tail + radius], new[lo:len(new) - tail + radius], head - lo, head - lo


def _matches_at(pattern: re.Pattern[str], text: str, position: int) -> bool:
    return any(m.start() <= position <= m.end() for m in pattern.finditer(text))


def _names(tools: list[Any] | None) -> list[str]:
    out = []
    for tool in tools or []:
        if isinstance(tool, dict):
            fn = tool.get("function") if isinstance(tool.get("function"), dict) else tool
            out.append(str(fn.get("name", json.dumps(tool, sort_keys=True))))
        else:
            out.append(json.dumps(tool, sort_keys=True))
    return out


def _canonical(value: str) -> Any:
    try:
        return json.dumps(json.loads(value), sort_keys=True)
    except (json.JSONDecodeError, TypeError):
        return None


def classify(prev: Round, cur: Round, span_prev: Span | None, span_cur: Span | None) -> str:
    """Why two rounds differ where they first differ."""
    field_name = span_cur.field if span_cur else span_prev.field if span_prev else ""
    if field_name == "tools" or (span_prev and span_prev.field == "tools"):
        if _names(prev.tools) != _names(cur.tools) and sorted(_names(prev.tools)) == sorted(_names(cur.tools)):
            return TOOL_ORDER
        old_tools = json.dumps(prev.tools, sort_keys=True)
        if old_tools == json.dumps(cur.tools, sort_keys=True):
            return JSON_KEY_ORDER
    index = span_cur.message_index if span_cur else None
    prev_msgs, cur_msgs = prev.messages, cur.messages
    if index is not None and index < len(prev_msgs) and index < len(cur_msgs):
        old_msg = prev_msgs[index]
        # a message dropped or summarised: later old messages reappear further up in the new round
        later_old = {json.dumps(m, sort_keys=True) for m in prev_msgs[index + 1:]}
        new_dump = [json.dumps(m, sort_keys=True) for m in cur_msgs]
        if old_msg.get("role") != "system" and any(m in later_old for m in new_dump[:index + 1]):
            return HISTORY_TRUNCATED
        old_value, new_value = _field_value(prev, span_prev), _field_value(cur, span_cur)
        canonical_old = _canonical(old_value)
        if canonical_old is not None and canonical_old == _canonical(new_value) and old_value != new_value:
            return JSON_KEY_ORDER
        if old_value != new_value and old_value.split() == new_value.split():
            return WHITESPACE
        old_win, new_win, at_old, at_new = _diff_window(old_value, new_value)
        if _matches_at(_TIMESTAMP, old_win, at_old) and _matches_at(_TIMESTAMP, new_win, at_new):
            return TIMESTAMP
        if _matches_at(_RANDOM_ID, old_win, at_old) and _matches_at(_RANDOM_ID, new_win, at_new):
            return RANDOM_ID
        if old_msg.get("role") == "system" and index == 0:
            return SYSTEM_PROMPT_CHANGED
        if len(cur_msgs) < len(prev_msgs):
            return HISTORY_TRUNCATED
        return HISTORY_EDITED
    if index is not None and index >= len(cur_msgs):
        return HISTORY_TRUNCATED
    return OTHER


# -- the analysis ------------------------------------------------------------------------------------
@dataclass
class RoundFinding:
    round: int
    breaks_cache: bool
    cause: str
    message_index: int | None
    field: str | None
    first_diff_char: int | None
    common_prefix_chars: int
    common_prefix_tokens: int
    prompt_tokens: int
    recomputed_tokens: int
    append_only_recomputed_tokens: int
    cacheable_fraction: float
    tokens_exact: bool
    old_snippet: str = ""
    new_snippet: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Analysis:
    findings: list[RoundFinding]
    rendering: str
    errors: list[str]

    @property
    def first_break(self) -> RoundFinding | None:
        return next((f for f in self.findings if f.breaks_cache), None)

    def totals(self) -> dict[str, int]:
        return {"recomputed": sum(f.recomputed_tokens for f in self.findings),
                "append_only": sum(f.append_only_recomputed_tokens for f in self.findings)}


def snippet(text: str, position: int, radius: int = 60) -> str:
    """HTML: ``radius`` characters either side of ``position``, the rest of the line marked."""
    lo, hi = max(0, position - radius), min(len(text), position + radius)
    before, after = html.escape(text[lo:position]), html.escape(text[position:hi])
    return f"{'…' if lo else ''}{before}<mark>{after}</mark>{'…' if hi < len(text) else ''}"


def analyse(transcript: Transcript, counter: TokenCounter | None = None, backend: Any = None) -> Analysis:
    """Compare each round with the one before; one finding per round (round 1 has nothing before it)."""
    counter = counter or EstimatingTokenCounter()
    rendered: list[Rendered] = []
    how = "stable serialization"
    for round_ in transcript.rounds:
        if backend is not None and not round_.tools:
            item = render_with_template(round_, backend)
        else:
            item = serialize(round_)
        how = item.how
        rendered.append(item)
    findings: list[RoundFinding] = []
    for index, current in enumerate(rendered):
        tokens = counter.count(current.text)
        if index == 0:
            findings.append(RoundFinding(1, False, NONE, None, None, None, 0, 0, tokens, tokens, tokens, 0.0, counter.exact))
            continue
        previous = rendered[index - 1]
        prev_round, cur_round = transcript.rounds[index - 1], transcript.rounds[index]
        common = common_prefix_length(previous.text, current.text)
        common_tokens = min(counter.count(current.text[:common]), tokens) if common else 0
        prev_tokens = findings[-1].prompt_tokens
        append_only = max(tokens - prev_tokens, counter.count(_content_text(cur_round.messages[-1].get("content") or "")))
        if common >= len(previous.text):
            cause, breaks, span_prev, span_cur, diff = NONE, False, None, None, None
        else:
            diff = common
            span_prev, span_cur = previous.locate(common), current.locate(common)
            last_index = len(prev_round.messages) - 1
            in_last = span_prev is not None and span_prev.message_index == last_index and span_prev.field != "role"
            in_last = in_last or (span_prev is not None and span_prev.field == "template" and common >= _start_of(previous, last_index))
            if len(prev_round.messages) == 1:  # whole prompts (one text file per round): judge by what is lost
                in_last = counter.count(previous.text[common:]) <= END_TOLERANCE_TOKENS
            breaks = not in_last
            cause = classify(prev_round, cur_round, span_prev, span_cur) if breaks else END_OF_PROMPT
        span = span_cur or span_prev
        findings.append(RoundFinding(
            round=index + 1, breaks_cache=breaks, cause=cause,
            message_index=span.message_index if span and diff is not None else None,
            field=span.field if span and diff is not None else None,
            first_diff_char=diff, common_prefix_chars=common, common_prefix_tokens=common_tokens, prompt_tokens=tokens,
            recomputed_tokens=max(tokens - common_tokens, 0), append_only_recomputed_tokens=min(append_only, tokens),
            cacheable_fraction=round(common_tokens / tokens, 4) if tokens else 0.0, tokens_exact=counter.exact,
            old_snippet=snippet(previous.text, diff) if diff is not None else "",
            new_snippet=snippet(current.text, diff) if diff is not None else ""))
    return Analysis(findings, how, list(transcript.errors))


def _start_of(rendered: Rendered, message_index: int) -> int:
    return next((s.start for s in rendered.spans if s.message_index == message_index), len(rendered.text))


# -- provider billing --------------------------------------------------------------------------------
@dataclass(frozen=True)
class BillingRule:
    name: str
    minimum: int  # no caching below this many prompt tokens
    step: int  # cached tokens are counted in these units
    input_per_million: float
    cached_per_million: float

    def cached(self, common_prefix_tokens: int, prompt_tokens: int) -> int:
        if prompt_tokens < self.minimum or common_prefix_tokens < self.minimum:
            return 0
        return (common_prefix_tokens // self.step) * self.step

    def cost(self, cached_tokens: int, prompt_tokens: int) -> float:
        return ((prompt_tokens - cached_tokens) * self.input_per_million + cached_tokens * self.cached_per_million) / 1e6


# Example prices in US$ per million input tokens; edit them in the page or pass your own.
BILLING_RULES = {
    "OpenAI (gpt-4o-mini)": BillingRule("OpenAI (gpt-4o-mini)", 1024, 128, 0.15, 0.075),
    "DeepSeek (deepseek-chat)": BillingRule("DeepSeek (deepseek-chat)", 64, 64, 0.27, 0.07),
    "Exact prefix (llama-server)": BillingRule("Exact prefix (llama-server)", 0, 1, 0.0, 0.0),
}


def billing(analysis: Analysis, rule: BillingRule) -> list[dict[str, Any]]:
    """Per round: tokens billed as cached, and the cost as sent and as an append-only version."""
    rows = []
    for finding in analysis.findings:
        cached = rule.cached(finding.common_prefix_tokens, finding.prompt_tokens)
        ideal_prefix = finding.prompt_tokens - finding.append_only_recomputed_tokens
        ideal_cached = rule.cached(ideal_prefix, finding.prompt_tokens)
        rows.append({"round": finding.round, "prompt_tokens": finding.prompt_tokens, "cached_tokens": cached,
                     "cost": rule.cost(cached, finding.prompt_tokens),
                     "append_only_cached_tokens": ideal_cached,
                     "append_only_cost": rule.cost(ideal_cached, finding.prompt_tokens)})
    return rows


# -- a single system prompt: what each strategy of experiment 3 would send -----------------------------
def simulate(system_prompt: str, strategy: str, rounds: int = 6) -> Transcript:
    """The rounds experiment 3 would send with ``system_prompt`` as its document, with stand-in answers."""
    conversation, out = Conversation(system_prompt, strategy), []
    for round_no in range(1, rounds + 1):
        out.append(Round(conversation.next_messages(), None, strategy))
        conversation.answered(f"(answer {round_no})")
    return Transcript(out, [], "simulated")


# -- live replay ---------------------------------------------------------------------------------------
def replay_request(round_: Round, backend: Any) -> Any:
    """The chat request that replays one logged round as it was sent (tools as a system preamble for
    llama-server, whose small default model has no tool template)."""
    from core.backends import ChatRequest

    messages = [dict(m) for m in round_.messages]
    extra: dict[str, Any] = {}
    if round_.tools:
        if getattr(backend, "kind", "") == "llama":
            preamble = "[tools]\n" + json.dumps(round_.tools, ensure_ascii=False) + "\n"
            if messages[0].get("role") == "system":
                messages[0]["content"] = preamble + _content_text(messages[0].get("content") or "")
            else:
                messages.insert(0, {"role": "system", "content": preamble})
        else:
            extra["tools"] = round_.tools
    for message in messages:
        if not isinstance(message.get("content"), str):
            message["content"] = _content_text(message.get("content") or "")
    return ChatRequest(messages, max_tokens=REPLAY_ANSWER_TOKENS, extra=extra)


def replay(transcript: Transcript, backend: Any, cancel: Any = None, on_progress: Any = None, label: str | None = None):
    """Send the rounds in order; yield one `RoundResult` per round (experiment ``doctor``)."""
    from core.results import RoundResult

    for index, round_ in enumerate(transcript.rounds, start=1):
        if cancel is not None and cancel.is_set():
            return
        result = backend.stream_chat(replay_request(round_, backend), on_progress=on_progress, cancel=cancel)
        if cancel is not None and cancel.is_set():
            return
        yield RoundResult.from_request("doctor", index, result, strategy=label or transcript.kind)
        if result.error:
            return
