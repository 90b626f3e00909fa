"""One call, one round: LLM records nested in one another are one request seen twice, or a wrapper around requests.

Two instrumentations on one client (OpenInference and OpenTelemetry's GenAI instrumentation), a framework's own
span around the client's (agno's ``OpenAIChat.invoke`` around ``chat gpt-4o-mini``, the Vercel AI SDK's
``ai.generateText`` around ``ai.generateText.doGenerate``) each write an LLM record for the same request. Counted
apart, one request becomes several rounds that "repeat" each other. Here a record with one LLM record inside it is
that record's call (the fuller of the two is kept); a record with several inside wraps several calls (an agent's
run) and is left out, its calls are the rounds. The notes say how many of each.
"""

from __future__ import annotations

from dataclasses import dataclass

from core.doctor.model import Round
from core.words import Sentence


@dataclass
class Node:
    """One LLM record: its id, the id of the record it sits in (any kind), and its round."""

    key: str
    parent: str | None
    round: Round


def _fuller(outer: Round, inner: Round) -> Round:
    """The round that holds more of the request: whole before cut, more messages, tools seen; on a tie the
    inner one (nearer the wire). The usage comes from whichever recorded it."""
    def rank(round_: Round) -> tuple[bool, int, bool]:
        return round_.gap is None, len(round_.messages), round_.raw_tools is not None
    kept, other = (outer, inner) if rank(outer) > rank(inner) else (inner, outer)
    if kept.measured is None and kept.gap is None and other.gap is None:
        kept.measured = other.measured
    return kept


def one_per_call(nodes: list[Node], unit: str) -> tuple[list[Node], list[str]]:
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
                below = [Node(node.key, node.parent, _fuller(node.round, below[0].round))]
            elif below:
                wrappers += 1
            calls[node.key] = below or [node]
    kept = [call for node in nodes if node.key in calls for call in calls[node.key]]
    notes: list[str] = [Sentence("doctor_notes.merged", n=merged, unit=unit)] if merged else []
    notes += [Sentence("doctor_notes.wrappers", n=wrappers, unit=unit)] if wrappers else []
    return kept, notes
