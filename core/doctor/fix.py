"""Mechanical fixes: the log's rounds rewritten so that what breaks the cache for want of care no longer does.

Fixable (`FIXABLE`), because the fix changes no meaning and needs no judgement:

- a timestamp or random id early in the prompt (`TIMESTAMP`, `RANDOM_ID`), in the instructions or a
  user's words (never in a tool call or result, where it is data): the changing value moves to the end.
  It leaves the message the doctor found it in (the whole line when that line is at most
  `MOVE_LINE_CHARS` characters, else the value alone) and is appended to the round's last message after
  a blank line; later rounds send that message with the value it had, as an agent that appends the time
  to each new turn would. Only values that differ between rounds move: a date that stays is left alone.
- tools in a changing order (`TOOL_ORDER`): every round's tools sorted by name (an Anthropic
  ``cache_control`` on the last tool stays on the last tool).
- JSON with its keys in another order (`JSON_KEY_ORDER`): in the tools, every object's keys sorted; in
  a message, every JSON string (content, tool-call arguments) re-serialised with sorted keys.

Everything else (history truncated or edited, a changed system prompt, model or parameter, tools added,
reasoning stripped, a template that rewrites turns) changes what the model is told, and is left as it is.
Only the causes the doctor found are fixed, so a clean log comes back unchanged; the doctor reads the
fixed rounds again and fixes again (at most `PASSES` times) while a fixable cause remains. The fixed log
is written in the input's own shape (JSONL lines or a JSON array, wrappers and responses kept).

The log is parsed for fixing only when the analysis found something to fix (`fixable`): a 42 MB log of
1,000 append-only rounds was parsed twice more on the doctor's page (3.13 GB, against the CLI's 1.28 GB).
A caller that has read and analysed the log already passes its transcript and analysis. A line nested too
deeply to parse is left as it is (the doctor named it), and a log too deep to fix is a sentence.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from core.doctor.analysis import Analysis, analyse
from core.doctor.causes import JSON_KEY_ORDER, RANDOM_ID, RANDOM_ID_PATTERN, TIMESTAMP, TIMESTAMP_PATTERN, TOOL_ORDER
from core.doctor.inputs import REQUEST_KEYS, load_inputs
from core.doctor.model import ANTHROPIC, CHAT, GEMINI, RESPONSES, Round, Transcript, TranscriptError, tool_name
from core.doctor.replay import replay
from core.records import RoundResult
from core.words import Sentence

FIXABLE = (TIMESTAMP, RANDOM_ID, TOOL_ORDER, JSON_KEY_ORDER)
MOVE_LINE_CHARS = 200
PASSES = 3
Holder = tuple[Any, Any]  # (container, key): where a message's content lives in the body


@dataclass
class _Entry:
    """One log entry: the parsed item, the request body inside it, and the original line (JSONL)."""

    item: Any
    body: dict[str, Any] | None
    line: str = ""
    changed: bool = False


@dataclass
class FixedLog:
    text: str  # the fixed log, in the input's format
    kind: str  # jsonl | json
    fixed: list[str]  # the causes fixed
    left: list[str]  # causes found that cannot be fixed mechanically
    changes: list[str] = field(default_factory=list)  # what was done, in words
    before: Analysis | None = None
    after: Analysis | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "fixed": self.fixed, "left": self.left, "changes": self.changes}


# -- the log, item by item --------------------------------------------------------------------------------


def _request(item: Any) -> dict[str, Any] | None:
    """The request body of a log item (bare, wrapped, or a gateway's ``{"request": {"body": ...}}``)."""
    if not isinstance(item, dict):
        return None
    key = next((k for k in REQUEST_KEYS if isinstance(item.get(k), dict)), None)
    if key is None:
        return item
    request: dict[str, Any] = item[key]
    body = request.get("body")
    return body if isinstance(body, dict) else request


def _parse(text: str) -> tuple[str, Any, list[_Entry]]:
    """The log as entries: a JSON array (or ``{"requests": [...]}``), else JSONL (it starts with ``[`` or ``{``)."""
    if text.lstrip().startswith("["):
        data = json.loads(text)
    else:
        try:
            data = json.loads(text)
        except (json.JSONDecodeError, RecursionError):  # JSONL (its first line may be nested too deeply)
            data = None
        if not (isinstance(data, dict) and isinstance(data.get("requests"), list)):
            entries = []
            lines = text.split("\n")  # as the doctor numbers them: U+2028 inside a string is no line break
            for line in lines[:-1] if lines[-1] == "" else lines:
                try:
                    item = json.loads(line) if line.strip() else None
                except (json.JSONDecodeError, RecursionError):  # the doctor named the line; it is kept as it is
                    item = None
                entries.append(_Entry(item, _request(item), line))
            return "jsonl", None, entries
    items = data["requests"] if isinstance(data, dict) and isinstance(data.get("requests"), list) else data
    items = items if isinstance(items, list) else [items]
    return "json", data, [_Entry(item, _request(item)) for item in items]


def _write(kind: str, data: Any, entries: list[_Entry]) -> str:
    if kind == "jsonl":
        return "\n".join(json.dumps(e.item, ensure_ascii=False) if e.changed else e.line for e in entries) + "\n"
    if isinstance(data, dict) and isinstance(data.get("requests"), list):
        data["requests"] = [e.item for e in entries]
    else:
        data = [e.item for e in entries] if isinstance(data, list) else entries[0].item
    return json.dumps(data, ensure_ascii=False, indent=2) + "\n"


def _read(name: str, text: str, fmt: str | None) -> Transcript:
    return load_inputs([(name, text.encode("utf-8"))], fmt=fmt)


def _aligned(entries: list[_Entry], transcript: Transcript) -> list[tuple[_Entry, Round]]:
    """Each round the doctor read, with the log entry it came from (its source ends with the entry's
    number: ``NAME line N`` or ``NAME item N``); unreadable entries are left as they are."""
    out = []
    for round_ in transcript.rounds:
        number = round_.source.rsplit(" ", 1)[-1]
        if number.isdigit() and 0 < int(number) <= len(entries) and entries[int(number) - 1].body is not None:
            out.append((entries[int(number) - 1], round_))
    return out


# -- messages in each format, numbered as the doctor numbers them (system prompt first) -------------------


def _holders(body: dict[str, Any], fmt: str) -> list[Holder]:
    out: list[Holder] = []
    if fmt == CHAT:
        return [(m, "content") for m in body.get("messages") or []]
    if fmt == ANTHROPIC:
        out = [(body, "system")] if body.get("system") else []
        return out + [(m, "content") for m in body.get("messages") or []]
    if fmt == RESPONSES:
        out = [(body, "instructions")] if body.get("instructions") else []
        items = body.get("input")
        if isinstance(items, str):
            return out + [(body, "input")]
        for item in items if isinstance(items, list) else []:
            kind = item.get("type", "message") if isinstance(item, dict) else None
            out.append((item, "output" if kind == "function_call_output" else "arguments" if kind == "function_call"
                        else "content"))
        return out
    if fmt == GEMINI:
        system = body.get("systemInstruction") or body.get("system_instruction")
        out = [(system, "parts")] if isinstance(system, dict) else []
        return out + [(c, "parts") for c in body.get("contents") or []]
    return out


def _slots(holder: Holder) -> Iterator[Holder]:
    """Every string of one message's content: the content itself, or the ``text`` of each part."""
    container, key = holder
    value = container.get(key) if isinstance(container, dict) else None
    if isinstance(value, str):
        yield container, key
    elif isinstance(value, list):
        for part in value:
            if isinstance(part, dict) and isinstance(part.get("text"), str):
                yield part, "text"


def _append(holder: Holder, text: str, fmt: str) -> None:
    container, key = holder
    value = container.get(key)
    if isinstance(value, str) or value is None:
        container[key] = (value + "\n\n" if value else "") + text
    elif isinstance(value, list):
        part_type = {RESPONSES: "input_text", GEMINI: None}.get(fmt, "text")
        value.append({"type": part_type, "text": text} if part_type else {"text": text})


def _message_text(body: dict[str, Any], fmt: str, index: int) -> str | None:
    holders = _holders(body, fmt)
    if index >= len(holders):
        return None
    return "\n".join(c[k] for c, k in _slots(holders[index]))


# -- the fixes --------------------------------------------------------------------------------------------


def _volatile(texts: list[str | None], number: int) -> list[str]:
    """Timestamps and ids in round ``number``'s message that some other round's same message lacks."""
    text = texts[number]
    if text is None:
        return []
    others = [t for i, t in enumerate(texts) if i != number and t is not None]
    values = {m.group(0) for pattern in (TIMESTAMP_PATTERN, RANDOM_ID_PATTERN) for m in pattern.finditer(text)}
    return sorted((v for v in values if any(v not in other for other in others)), key=text.index)


def _move_volatile(rounds: list[tuple[_Entry, Round]], index: int, changes: list[str]) -> None:
    texts = [_message_text(entry.body, round_.format, index) if entry.body is not None else None
             for entry, round_ in rounds]
    appended: dict[int, str] = {}  # message number -> what the round it was last in appended to it
    moved_any = 0
    for number, (entry, round_) in enumerate(rounds):
        body = entry.body
        assert body is not None
        holders, fmt = _holders(body, round_.format), round_.format
        last = len(holders) - 1
        if index >= last:
            continue
        moved: list[str] = []
        for value in _volatile(texts, number):
            for container, key in _slots(holders[index]):
                string = container[key]
                if value not in string:
                    continue
                line = next(ln for ln in string.splitlines(keepends=True) if value in ln)
                unit = line if len(line.strip()) <= MOVE_LINE_CHARS else value
                container[key] = string.replace(unit, "", 1)
                moved.append(unit.strip())
        for message, text in appended.items():
            if message < last:
                _append(holders[message], text, fmt)
        if moved:
            _append(holders[last], "\n".join(dict.fromkeys(moved)), fmt)
            appended[last] = "\n".join(dict.fromkeys(moved))
            moved_any += 1
        entry.changed = entry.changed or bool(moved) or any(m < last for m in appended)
    if moved_any:
        changes.append(f"moved the changing timestamp or id out of message {index} to the end of each round's last "
                       f"message ({moved_any} rounds)")


def _sorted_keys(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _sorted_keys(value[k]) for k in sorted(value)}
    if isinstance(value, list):
        return [_sorted_keys(v) for v in value]
    return value


def _each_tool_list(body: dict[str, Any]) -> Iterator[list[Any]]:
    tools = body.get("tools")
    if not isinstance(tools, list):
        return
    grouped = [t["functionDeclarations"] for t in tools if isinstance(t, dict)
               and isinstance(t.get("functionDeclarations"), list)]
    yield from grouped or [tools]


def _sort_tools(rounds: list[tuple[_Entry, Round]], changes: list[str]) -> None:
    for entry, _ in rounds:
        assert entry.body is not None
        for tools in _each_tool_list(entry.body):
            marked = [t for t in tools if isinstance(t, dict) and "cache_control" in t]
            breakpoint_last = len(marked) == 1 and tools and marked[0] is tools[-1]
            control = marked[0].pop("cache_control") if breakpoint_last else None
            ordered = sorted(tools, key=tool_name)
            if control is not None:
                ordered[-1]["cache_control"] = control
            entry.changed = entry.changed or ordered != tools
            tools[:] = ordered
    changes.append("sorted every round's tools by name")


def _canonical_json(text: str) -> str:
    try:
        value = json.loads(text)
    except (json.JSONDecodeError, TypeError, RecursionError):
        return text
    return json.dumps(value, sort_keys=True, ensure_ascii=False) if isinstance(value, (dict, list)) else text


def _sort_json(rounds: list[tuple[_Entry, Round]], indexes: set[int | None], changes: list[str]) -> None:
    for entry, round_ in rounds:
        body = entry.body
        assert body is not None
        before = json.dumps(body, ensure_ascii=False)
        if None in indexes and isinstance(body.get("tools"), list):
            body["tools"] = _sorted_keys(body["tools"])
        holders = _holders(body, round_.format)
        for index in (i for i in indexes if i is not None and i < len(holders)):
            for container, key in _slots(holders[index]):
                container[key] = _canonical_json(container[key])
            message = holders[index][0]
            for call in message.get("tool_calls") or [] if isinstance(message, dict) else []:
                function = call.get("function") if isinstance(call, dict) else None
                if isinstance(function, dict) and isinstance(function.get("arguments"), str):
                    function["arguments"] = _canonical_json(function["arguments"])
                elif isinstance(call, dict) and isinstance(call.get("input"), dict):
                    call["input"] = _sorted_keys(call["input"])
        entry.changed = entry.changed or json.dumps(body, ensure_ascii=False) != before
    places = sorted(indexes, key=lambda i: -1 if i is None else i)
    where = ", ".join("the tools" if i is None else f"message {i}" for i in places)
    changes.append(f"sorted the JSON keys in {where}")


def _said(rounds: list[tuple[_Entry, Round]], number: int, index: int) -> bool:
    """Whether a message is instructions or a user's words (a value moves out of those, never out of a tool
    call or its result, where it is data)."""
    messages = rounds[number - 1][1].messages
    return index < len(messages) and messages[index].role in ("system", "developer", "user") and not any(
        b.field == "tool_calls" or b.text.startswith("<tool_call_id>") for b in messages[index].blocks)


def _apply(analysis: Analysis, rounds: list[tuple[_Entry, Round]], changes: list[str]) -> set[str]:
    """Fix each fixable cause the analysis found; the causes acted on."""
    found = [f for f in analysis.findings if f.breaks_cache and f.cause in FIXABLE]
    moving = [f for f in found if f.cause in (TIMESTAMP, RANDOM_ID) and f.message_index is not None
              and _said(rounds, f.round, f.message_index)]
    for index in sorted({f.message_index for f in moving if f.message_index is not None}):
        _move_volatile(rounds, index, changes)
    applied = {f.cause for f in moving}
    if any(f.cause == TOOL_ORDER for f in found):
        _sort_tools(rounds, changes)
        applied.add(TOOL_ORDER)
    json_at = {f.message_index for f in found if f.cause == JSON_KEY_ORDER}
    if json_at:
        _sort_json(rounds, json_at, changes)
        applied.add(JSON_KEY_ORDER)
    return applied


def fixable(analysis: Analysis) -> bool:
    """Whether the analysis found a cause `fix_log` can fix (else the log need not be parsed again)."""
    return any(f.breaks_cache and f.cause in FIXABLE for f in analysis.findings)


def left_causes(analysis: Analysis, fixed: set[str] | frozenset[str] = frozenset()) -> list[str]:
    """The causes found that were not fixed."""
    return sorted({f.cause for f in analysis.findings if f.breaks_cache and f.cause not in fixed})


def fix_log(name: str, text: str, fmt: str | None = None, transcript: Transcript | None = None,
            analysis: Analysis | None = None) -> FixedLog:
    """The log with its mechanically fixable causes fixed, analysed before and after (statically); ``fmt``
    forces the format of every line, as the doctor's ``--format`` does. ``transcript`` and ``analysis``:
    the log as the caller read and analysed it already, so it is not read again."""
    try:
        return _fix(name, text, fmt, transcript, analysis)
    except RecursionError:
        raise TranscriptError(Sentence("doctor_fix_refused.too_deep", name=name)) from None


def _fix(name: str, text: str, fmt: str | None, transcript: Transcript | None,
         analysis: Analysis | None) -> FixedLog:
    if not text.lstrip().startswith(("[", "{")):
        raise TranscriptError(Sentence("doctor_fix_refused.not_log", name=name))
    transcript = transcript if transcript is not None else _read(name, text, fmt)
    if len(transcript.rounds) < 2:
        raise TranscriptError(Sentence("doctor_fix_refused.too_few", name=name))
    before = analysis = analysis if analysis is not None else analyse(transcript)
    if not fixable(before):  # nothing to rewrite: the log is not parsed again
        kind = "json" if text.lstrip().startswith("[") else "jsonl"
        return FixedLog(text, kind, [], left_causes(before), [], before, before)
    kind, data, entries = _parse(text)
    rounds = _aligned(entries, transcript)
    if len(rounds) < 2:
        raise TranscriptError(Sentence("doctor_fix_refused.too_few", name=name))
    fixed: set[str] = set()
    changes: list[str] = []
    out = text
    for _ in range(PASSES):
        applied = _apply(analysis, rounds, changes)
        if not applied:
            break
        fixed |= applied
        out = _write(kind, data, entries)
        transcript = _read(name, out, fmt)
        rounds = _aligned(entries, transcript)
        analysis = analyse(transcript)
    return FixedLog(out, kind, sorted(fixed), left_causes(before, fixed), changes, before, analysis)


def fixed_transcript(name: str, fixed: FixedLog, fmt: str | None = None) -> Transcript:
    """The fixed rounds, read back as the doctor reads any log."""
    return _read(name, fixed.text, fmt)


# -- the proof on a real engine ---------------------------------------------------------------------------

BEFORE, AFTER = "before", "after"


@dataclass
class ProofRound:
    round: int
    before_recomputed: int | None
    after_recomputed: int | None
    before_prompt: int | None
    after_prompt: int | None

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def prove(original: Transcript, fixed: Transcript, backend: Any, cancel: Any = None,
          on_progress: Callable[[dict[str, Any]], None] | None = None) -> Iterator[RoundResult]:
    """Replay the original rounds (strategy ``before``), then the fixed ones (``after``), on ``backend``.

    Each replay starts with a tag of its own, so round 1 is cold in both and neither reuses what an earlier
    run (an earlier proof of the same log, or the other replay) left in the server's cache or memory."""
    yield from replay(original, backend, cancel, on_progress, label=BEFORE, tag=secrets.token_hex(6))
    yield from replay(fixed, backend, cancel, on_progress, label=AFTER, tag=secrets.token_hex(6))


def proof_table(rows: list[RoundResult]) -> list[ProofRound]:
    """Tokens recomputed per round, before and after the fix, side by side."""
    before = {r.round: r for r in rows if r.strategy == BEFORE and not r.error}
    after = {r.round: r for r in rows if r.strategy == AFTER and not r.error}
    return [ProofRound(n, before[n].recomputed_tokens if n in before else None,
                       after[n].recomputed_tokens if n in after else None,
                       before[n].prompt_tokens if n in before else None,
                       after[n].prompt_tokens if n in after else None)
            for n in sorted(set(before) | set(after))]

