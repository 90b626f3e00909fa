"""One call, one round, for records written side by side: what is merged and what must never be (a retry, two
calls made at once). The real case, two instrumentations writing siblings, is read in test_traces_siblings.py."""

from __future__ import annotations

from core.doctor.calls import Node, one_per_call
from core.doctor.formats import chat_round
from core.doctor.traces import LLM_SPANS

SECOND = 1_000_000_000


def _node(key: str, question: str, start: int, end: int, parent: str | None = "agent",
          model: str = "gpt-4o") -> Node:
    round_ = chat_round({"model": model, "messages": [{"role": "system", "content": "Be terse."},
                                                      {"role": "user", "content": question}]}, key)
    return Node(key, parent, round_, start * SECOND, end * SECOND)


def test_side_by_side_records_of_one_call_are_one_round_and_said():
    nodes = [_node("client", "Sky?", 10, 14), _node("callback", "Sky?", 10, 14, model="openai/gpt-4o"),
             _node("next", "Grass?", 15, 18)]
    kept, notes = one_per_call(nodes, LLM_SPANS)
    assert [node.key for node in kept] == ["client", "next"]
    assert notes == ["1 LLM span written beside another record of the same call (one parent, overlapping in time, "
                     "the same model and messages: two instrumentations, one of them writing its record after the "
                     "call) merged: one round per call"]


def test_a_retry_calls_at_once_two_models_other_parents_and_unknown_times_stay_apart():
    retry = [_node("failed", "Sky?", 10, 12), _node("retried", "Sky?", 13, 15)]  # after the failed one ended
    at_once = [_node("a", "Sky?", 10, 14), _node("b", "Grass?", 10, 14)]  # different messages
    parents = [_node("one", "Sky?", 10, 14, "run 1"), _node("two", "Sky?", 10, 14, "run 2")]
    untimed = [_node("x", "Sky?", 0, 0), _node("y", "Sky?", 0, 0)]
    two_models = [_node("gpt", "Sky?", 10, 14), _node("claude", "Sky?", 10, 14, model="claude-sonnet-4")]
    for nodes in (retry, at_once, parents, untimed, two_models):
        kept, notes = one_per_call(nodes, LLM_SPANS)
        assert len(kept) == 2 and notes == [], [node.key for node in nodes]
