"""One call, one round: LLM records nested in one another are one request seen twice, or a wrapper around requests.

Two instrumentations on one client (OpenInference and OpenTelemetry's GenAI instrumentation), a framework's own
span around the client's (agno's ``OpenAIChat.invoke`` around ``chat gpt-4o-mini``, the Vercel AI SDK's
``ai.generateText`` around ``ai.generateText.doGenerate``) each write an LLM record for the same request. Counted
apart, one request becomes several rounds that "repeat" each other. Here a record with one LLM record inside it is
that record's call (the fuller of the two is kept); a record with several inside wraps several calls (an agent's
run) and is left out, its calls are the rounds.

An instrumentation that writes its record after the call (LiteLLM's callback) puts it beside the client's record,
not around it: two records under one parent, overlapping in time, holding the same messages for the same model,
are one call too (a retry starts after its failed call ends; two calls made at once hold different messages, or
ask two models the same question: none of them is merged). The notes say how many of each.
"""

from __future__ import annotations

from dataclasses import dataclass

from core import words
from core.doctor.model import Round
from core.words import Sentence


@dataclass
class Node:
    """One LLM record: its id, the id of the record it sits in (any kind), its round, and when it ran (ns since
    the epoch; 0: not written)."""

    key: str
    parent: str | None
    round: Round
    start: int = 0
    end: int = 0


def _fuller(outer: Round, inner: Round) -> Round:
    """The round that holds more of the request: whole before cut, more messages, tools seen; on a tie the
    inner one (nearer the wire). The usage comes from whichever recorded it."""
    def rank(round_: Round) -> tuple[bool, int, bool]:
        return round_.gap is None, len(round_.messages), round_.raw_tools is not None
    kept, other = (outer, inner) if rank(outer) > rank(inner) else (inner, outer)
    if kept.measured is None and kept.gap is None and other.gap is None:
        kept.measured = other.measured
    return kept


def one_per_call(nodes: list[Node], unit: Sentence) -> tuple[list[Node], list[str]]:
    """The records with nested duplicates merged and wrappers of several calls left out; the notes say so.
    Parents that are not LLM records (agent and chain spans) are passed through: only LLM records nest here."""
    keys: set[str] = set()
    for number, node in enumerate(nodes):  # records without an id, or with one id twice, are each their own
        if node.key in keys or not node.key:
            node.key = f"{node.key}#{number}"
        keys.add(node.key)
    by_key = {node.key: node for node in nodes}
    inside: dict[str, list[Node]] = {}
    for node in nodes:
        if node.parent in by_key and node.parent != node.key:
            inside.setdefault(node.parent, []).append(node)
    calls: dict[str, list[Node]] = {}  # each record's calls, children resolved before their parents
    merged = wrappers = 0
    seen: set[str] = set()
    for start in [node for node in nodes if node.parent not in by_key] + nodes:  # then any in a cycle of parents
        stack = [(start, False)]
        while stack:
            node, ready = stack.pop()
            if not ready:
                if node.key not in seen:  # a cycle of parent ids: each record once
                    seen.add(node.key)
                    stack += [(node, True)] + [(child, False) for child in inside.get(node.key, [])]
                continue
            below = [call for child in inside.get(node.key, []) for call in calls.pop(child.key, [])]
            if len(below) == 1:
                merged += 1
                below = [Node(node.key, node.parent, _fuller(node.round, below[0].round), node.start, node.end)]
            elif below:
                wrappers += 1
            calls[node.key] = below or [node]
    kept, beside = _side_by_side([call for node in nodes if node.key in calls for call in calls[node.key]])
    notes: list[str] = []
    if merged:
        notes.append(Sentence("doctor_notes.merged", n=merged, unit=words.counted(unit.key, merged)))
    if wrappers:
        notes.append(Sentence("doctor_notes.wrappers", n=wrappers, unit=words.counted(unit.key, wrappers)))
    if beside:
        notes.append(Sentence("doctor_notes.beside", n=beside, unit=words.counted(unit.key, beside)))
    return kept, notes


def _request(round_: Round) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """What two records of one call share whatever instrumentation wrote them: each message's role and text."""
    return tuple((m.role, tuple(b.text for b in m.blocks if b.field == "content")) for m in round_.messages)


def _same_model(one: Round, other: Round) -> bool:
    """The same model, or one not recorded; a router's provider prefix (``openai/gpt-4o``) is not a difference."""
    names = [str(r.model).rsplit("/", 1)[-1] for r in (one, other) if r.model]
    return len(set(names)) <= 1


def _side_by_side(nodes: list[Node]) -> tuple[list[Node], int]:
    """The calls with records of one call written side by side merged (the fuller kept), and how many were."""
    kept: list[Node] = []
    last: dict[str, Node] = {}  # per parent, the call seen last
    merged = 0
    for node in nodes:
        other = last.get(node.parent) if node.parent else None
        if (other is not None and node.end and other.end and node.start <= other.end and other.start <= node.end
                and not node.round.gap and not other.round.gap and _same_model(node.round, other.round)
                and _request(node.round) == _request(other.round)):
            other.round = _fuller(other.round, node.round)
            other.start, other.end = min(other.start, node.start), max(other.end, node.end)
            merged += 1
            continue
        kept.append(node)
        if node.parent:
            last[node.parent] = node
    return kept, merged
