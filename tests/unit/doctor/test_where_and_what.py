"""A break is placed where a user looks for it: the character within the named message's field (not within the
whole rendered request, tools first), and a changed parameter by its name and both values."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from core import doctor
from core.doctor.analysis import changed_parameter

FIXTURES = Path(__file__).resolve().parents[2] / "data" / "doctor"


def test_the_character_is_counted_within_the_message():
    analysis = doctor.analyse(doctor.load_paths([FIXTURES / "timestamp.jsonl"]))
    first = analysis.first_break
    assert first is not None and (first.message_index, first.field) == (0, "content")
    content = json.loads((FIXTURES / "timestamp.jsonl").read_text().splitlines()[0])["messages"][0]["content"]
    later = json.loads((FIXTURES / "timestamp.jsonl").read_text().splitlines()[2])["messages"][0]["content"]
    at = first.field_char
    assert at is not None and content[:at] == later[:at] and content[at] != later[at]
    assert first.first_diff_char > first.field_char  # the whole request's offset counts the tools before it


def test_a_changed_parameter_is_named_with_both_values():
    analysis = doctor.analyse(doctor.load_paths([FIXTURES / "params_changed.jsonl"]))
    first = analysis.first_break
    assert first is not None and first.cause == doctor.PARAMS_CHANGED
    assert (first.parameter, first.old_value, first.new_value) == ("thinking.budget_tokens", "1024", "4096")
    assert changed_parameter({"tool_choice": {"type": "auto"}}, {}) == ("tool_choice.type", "auto", None)


def test_the_cli_says_the_parameter_and_the_character_within_the_message():
    root = Path(__file__).resolve().parents[3]
    out = subprocess.run([sys.executable, "-m", "core", "doctor", str(FIXTURES / "params_changed.jsonl")],
                         capture_output=True, text=True, cwd=root, check=False).stdout
    assert "params_changed in the request parameters (params) at character 39 of it: thinking.budget_tokens " \
           "1024 -> 4096." in out


def test_the_summary_says_how_each_round_relates_as_it_is():
    """Real crewAI recordings (tests/data/README.md): the hierarchical manager's rounds extend an earlier round
    of its own, not the one before (a worker's request came between); the planner's observer rebuilds its one
    message each step, which is the same conversation with its last message replaced, not another one."""
    from core.cli.doctor import _no_break
    cassettes = FIXTURES / "cassettes"
    hierarchical = doctor.analyse(doctor.load_paths([cassettes / "crewai__hierarchical_process.jsonl"]))
    assert hierarchical.continuations() == {doctor.EARLIER: 3, doctor.NEW_CONVERSATION: 2}
    assert "3 extend an earlier round" in _no_break(hierarchical)
    planning_log = cassettes / "crewai__agent_kickoff_multi_step_task_with_planning.jsonl"
    planning = doctor.analyse(doctor.load_paths([planning_log]))
    assert planning.findings[8].cause == doctor.LAST_MESSAGE_REPLACED and not planning.findings[8].breaks_cache
    assert planning.continuations() == {doctor.NEW_CONVERSATION: 7, doctor.END_OF_PROMPT: 1,
                                        doctor.LAST_MESSAGE_REPLACED: 1}
    assert "every round extends" not in _no_break(planning)


def test_the_provider_is_read_off_the_response_before_the_model_name():
    """pydantic-ai's Groq recording (tests/data/README.md) with its URL taken out: the model is
    ``openai/gpt-oss-120b``, but Groq's own usage fields (``queue_time``, ``prompt_time``) say who served it, so
    Groq's rule applies (no published minimum), not OpenAI's 1,024-token minimum; the round that reports 256
    cached tokens agrees with it."""
    lines = (FIXTURES / "cassettes" / "pydantic-ai__groq_tool_use_failed_error.jsonl").read_text().splitlines()
    entries = [{k: v for k, v in json.loads(line).items() if k != "endpoint"} for line in lines]
    transcript = doctor.load_inputs([("groq.jsonl", "\n".join(json.dumps(e) for e in entries).encode())])
    analysis = doctor.analyse(transcript)
    assert [r.model for r in transcript.rounds] == ["openai/gpt-oss-120b"] * 3
    assert [f.provider for f in analysis.findings][1:] == ["Groq", "Groq"]
    assert analysis.findings[2].measured_cached_tokens == 256 and analysis.findings[2].verdict == doctor.AGREE


def test_a_miss_with_the_prefix_kept_and_the_minimum_met_is_said_as_the_providers_side():
    """The captured Anthropic log: round 4 kept its prefix (1,513 tokens from round 3, above the 1,024 minimum)
    and Anthropic read 0: the provider's side, with that evidence, so nobody searches the prompt for it."""
    analysis = doctor.analyse(doctor.load_paths([FIXTURES / "scenario_captured.jsonl"]))
    fourth = analysis.findings[3]
    assert fourth.provider_side and not fourth.breaks_cache and fourth.unexplained == [doctor.NOT_PROMISED]
    assert (fourth.common_prefix_tokens, fourth.minimum_tokens, fourth.measured_cached_tokens) == (1513, 1024, 0)
    root = Path(__file__).resolve().parents[3]
    out = subprocess.run([sys.executable, "-m", "core", "doctor", str(FIXTURES / "scenario_captured.jsonl")],
                         capture_output=True, text=True, cwd=root, check=False).stdout
    assert "On Anthropic's side, not in the prompt: it kept its first 1,513 tokens from round 3 and met the " \
           "1,024-token minimum; nothing in the prompt to change." in out
