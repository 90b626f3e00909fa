"""The classes of issue 26 on real recorded traffic (public cassettes converted to doctor logs; sources and
what was checked by hand in tests/data/README.md): a value that changes early in the prompt across
conversations, history compaction, a cache-keyed parameter inside the tail allowance, a miss below the
provider's minimum, the summary when rounds start other conversations, a tool list located at the tools,
and the cached-tokens chart's axis when every count is 0."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from core import doctor

CASSETTES = Path(__file__).resolve().parents[2] / "data" / "doctor" / "cassettes"


def analyse(name: str) -> doctor.Analysis:
    return doctor.analyse(doctor.load_paths([CASSETTES / f"{name}.jsonl"]))


@pytest.mark.parametrize("name,values", [
    ("crewai__crew_kickoff_usage_metrics", [("dog", "cat"), ("cat", "apple")]),
    ("crewai__kickoff_for_each_multiple_inputs", [("dog", "cat"), ("cat", "apple")]),
])
def test_a_value_early_in_the_prompt_across_conversations_is_a_break_with_a_fix(name, values):
    """crewAI's kickoff_for_each puts each input into the agent's role: "You are dog Researcher..." then
    "You are cat Researcher...". Each kickoff is another conversation, lost at character 8 of the system
    prompt to the value: never new_conversation, never "fine"."""
    analysis = analyse(name)
    later = analysis.findings[1:]
    assert [(f.breaks_cache, f.cause, f.message_index, f.field) for f in later] == \
        [(True, doctor.VARYING_PREFIX, 0, "content")] * 2
    assert [(f.old_value, f.new_value) for f in later] == values
    assert all(f.shareable_tokens and f.shareable_tokens > 10 and f.compared_with == f.round - 1 for f in later)
    assert all(f.measured_cached_tokens == 0 and f.verdict == doctor.AGREE for f in analysis.findings)


def test_two_agents_with_their_own_roles_stay_two_conversations():
    """crewAI's hierarchical process: the Senior Writer and the Researcher have their own role and backstory
    (not one template with a value): another conversation, no finding."""
    analysis = analyse("crewai__hierarchical_process")
    assert analysis.first_break is None
    assert [f.cause for f in analysis.findings[1:3]] == [doctor.NEW_CONVERSATION] * 2


def test_history_compaction_is_named_with_its_cost():
    """pydantic-ai's Responses compaction: round 3 posts the history to /responses/compact, round 4 sends the
    compaction item in place of it. The same conversation losing its cached history on purpose."""
    analysis = analyse("pydantic-ai__openai_responses_compact_messages")
    f = analysis.findings[3]
    assert (f.breaks_cache, f.cause, f.message_index, f.compared_with) == (True, doctor.HISTORY_COMPACTED, 1, 3)
    assert f.lost_tokens == analysis.findings[2].prompt_tokens - f.common_prefix_tokens > 0
    assert f.recomputed_tokens == f.prompt_tokens - f.common_prefix_tokens
    assert [g.cause for g in analysis.findings[1:3]] == [doctor.NONE, doctor.NONE]
    assert f.measured_prompt_tokens == 298 and f.measured_cached_tokens == 0


def test_a_cache_keyed_parameter_is_never_a_tail_edit():
    """Mirascope's resumed call lowers thinking.budget_tokens from 6400 to 1024; the whole first prompt is
    9 tokens, well inside the 64-token allowance for an edit of the last message."""
    analysis = analyse("mirascope__call_with_thinking_anthropic_sync")
    f = analysis.findings[1]
    assert (f.breaks_cache, f.cause, f.message_index, f.field) == (True, doctor.PARAMS_CHANGED, None, "params")
    assert doctor.where(f) == "the request parameters"
    assert [r.measured.prompt_tokens for r in analysis.rounds if r.measured] == [67, 97]


def test_no_provider_missed_below_the_providers_minimum():
    """crewAI's planning on Azure OpenAI: prompts of 267 to 787 tokens, 0 cached, under the 1,024-token minimum
    Azure documents: the prediction is 0 and agrees, never provider_missed."""
    analysis = analyse("crewai__azure_research_workflow_generates_steps")
    assert {f.provider for f in analysis.findings} == {"Azure OpenAI"}
    assert [f.measured_prompt_tokens for f in analysis.findings] == [480, 267, 330, 537, 787]
    assert [(f.predicted_cached_tokens, f.verdict) for f in analysis.findings] == [(0, doctor.AGREE)] * 5
    assert all(not f.unexplained for f in analysis.findings)


def test_a_removed_tool_list_is_located_at_the_tools():
    """crewAI's cache_hitting_between_agents: round 3 (the Researcher) drops the two delegation tools the CEO had;
    the change is in the tool list, not in "message 0"."""
    f = analyse("crewai__cache_hitting_between_agents").findings[2]
    assert (f.breaks_cache, f.cause, f.message_index, f.field) == (True, doctor.TOOLS_CHANGED, None, "tools")
    assert doctor.where(f) == "the tool list"


@pytest.mark.slow
def test_the_summary_never_says_every_round_extends_when_rounds_started_other_conversations():
    """crewAI's planner, executor and observer interleave: every switch is another conversation. The CLI says so."""
    proc = subprocess.run([sys.executable, "-m", "core", "doctor",
                           str(CASSETTES / "crewai__agent_kickoff_multi_step_task_with_planning.jsonl")],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "every round extends" not in proc.stdout
    counts = analyse("crewai__agent_kickoff_multi_step_task_with_planning").continuations()
    assert counts.get(doctor.NEW_CONVERSATION, 0) >= 1
    assert f"{counts[doctor.NEW_CONVERSATION]} start another conversation" in proc.stdout
    assert "No round breaks the cache within a conversation. From round 2:" in proc.stdout


def test_the_cached_tokens_chart_labels_whole_tokens_when_every_count_is_0():
    from core.charts.doctor import measured_chart
    from core.words import ContentWords
    findings = [f.to_dict() for f in analyse("crewai__crew_kickoff_usage_metrics").findings]
    spec = measured_chart(findings, ContentWords("en")).to_dict()
    y = spec["encoding"]["y"]
    assert y["axis"]["format"] == ",d" and y["scale"]["domainMax"] == 1 and y["scale"]["domainMin"] == 0


def test_a_miss_of_thousands_of_tokens_on_a_long_prompt_is_not_an_agreement():
    """15 % of a 40,000-token prompt once hid a 4,000-token miss; one cache step or 5 % of the prompt now."""
    from core.doctor.analysis import verdict
    assert verdict(38_000, 34_000, 40_000) == doctor.PROVIDER_MISSED
    assert verdict(38_000, 39_900, 40_000) == doctor.AGREE
    assert verdict(1_152, 1_280, 1_300) == doctor.AGREE  # one 128-token step on a short prompt
    assert verdict(1_152, 1_408, 2_091) == doctor.PROVIDER_HIT_MORE
