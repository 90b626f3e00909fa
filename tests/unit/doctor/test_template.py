"""Breaks that exist only after the chat template (core.doctor.template): a real llama-server with
Qwen3's template from llama.cpp, which drops the reasoning of earlier turns once a new user query
follows, against a body that only ever appends."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from core import doctor
from core.backends.connect import Connection, Target, open_connection
from core.doctor import template
from core.engine.server import LocalServer
from tests.support import DATA

QWEN3_TEMPLATE = DATA / "templates" / "Qwen-Qwen3-0.6B.jinja"
SYSTEM = {"role": "system", "content": "You are a weather assistant. Answer in one sentence."}
ASK = {"role": "user", "content": "Is it warm in Paris today?"}
CALL = {"role": "assistant", "content": "",
        "reasoning_content": "The user asks about Paris. I should call the weather tool for Paris first.",
        "tool_calls": [{"id": "call_1", "type": "function",
                        "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]}
RESULT = {"role": "tool", "tool_call_id": "call_1", "content": "{\"temp_c\": 24, \"sky\": \"clear\"}"}
ANSWER = {"role": "assistant", "content": "Yes: 24 °C and clear.", "reasoning_content": "24 degrees is warm."}
AGAIN = {"role": "user", "content": "And tomorrow?"}
CITY = {"type": "object", "properties": {"city": {"type": "string"}}}
TOOLS = [{"type": "function",
          "function": {"name": "get_weather", "description": "Weather for a city", "parameters": CITY}}]


def agent_log(edit_turn_2: bool = False) -> doctor.Transcript:
    """A tool loop that only appends: ask, call a tool (with reasoning), read the result, answer, ask again."""
    call = {**CALL, "reasoning_content": "Paris: call the tool."} if edit_turn_2 else CALL
    rounds = [[SYSTEM, ASK], [SYSTEM, ASK, CALL, RESULT], [SYSTEM, ASK, call, RESULT, ANSWER, AGAIN]]
    text = "\n".join(json.dumps({"model": "qwen3", "messages": m, "tools": TOOLS}) for m in rounds)
    return doctor.load_inputs([("agent.jsonl", text.encode())])


def test_a_turn_is_located_by_its_parts_in_the_rendering():
    chat = [SYSTEM, ASK, CALL]
    rendered = ("<|im_start|>system\nYou are a weather assistant. Answer in one sentence.<|im_end|>\n"
                "<|im_start|>user\nIs it warm in Paris today?<|im_end|>\n<|im_start|>assistant\n<think>\n"
                f"{CALL['reasoning_content']}\n</think>\n\n<tool_call>\n{{\"name\": \"get_weather\"}}\n</tool_call>"
                "<|im_end|>\n<|im_start|>assistant\n")
    think = rendered.index("<think>")
    assert template.locate(rendered, chat, think) == (2, "reasoning_content")
    assert template.locate(rendered, chat, rendered.index("Is it warm")) == (1, "content")
    assert template.locate(rendered, chat, len(rendered) - 3) == (None, None)  # the generation prompt


@pytest.fixture(scope="module")
def qwen3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Connection]:
    """The real llama-server and model, with the chat template of llama.cpp's models/templates/ (pinned commit)."""
    server = LocalServer(context=2048, log_dir=tmp_path_factory.mktemp("qwen3"),
                         extra_args=["--jinja", "--chat-template-file", str(QWEN3_TEMPLATE)])
    with server, open_connection(Target("llama", url=server.url)) as conn:
        yield conn


@pytest.mark.llama
def test_the_template_that_drops_earlier_reasoning_rewrote_turn_2(qwen3):
    transcript = agent_log()
    static = doctor.analyse(transcript)
    assert static.first_break is None, "the bodies only append"
    check = template.check(transcript, qwen3.backend)
    assert check.with_tools and "# Tools" in check.rounds[0].text and "get_weather" in check.rounds[0].text
    assert [r.rewrote_message for r in check.rounds] == [None, None, 2]
    assert check.rounds[1].lost_tokens == 0 and check.rounds[2].body_kept_prefix
    analysis = doctor.analyse(transcript, qwen3.counter, qwen3.backend)
    finding = analysis.findings[2]
    assert (finding.breaks_cache, finding.cause, finding.message_index, finding.field) == (
        True, doctor.TEMPLATE_REWROTE, 2, "reasoning_content")
    assert "The user asks about Paris" in finding.old_snippet and "ool_call&gt;" in finding.new_snippet
    assert finding.recomputed_tokens == check.rounds[2].tokens - (
        check.rounds[2].common_tokens or 0)
    assert not analysis.findings[1].breaks_cache
    assert any("the chat template rewrote turn 2" in note for note in analysis.notes)
    # the server itself agrees: in round 3 it re-processes everything from turn 2 on
    rows = list(doctor.replay(transcript, qwen3.backend))
    assert [r.error for r in rows] == [""] * 3
    assert rows[2].cached_tokens < rows[1].prompt_tokens - 20
    assert abs(rows[2].recomputed_tokens - finding.recomputed_tokens) <= 8


@pytest.mark.llama
def test_an_edited_turn_is_the_bodys_doing_not_the_templates(qwen3):
    analysis = doctor.analyse(agent_log(edit_turn_2=True), qwen3.counter, qwen3.backend)
    assert analysis.first_break is not None and analysis.first_break.round == 3
    assert analysis.first_break.cause != doctor.TEMPLATE_REWROTE


@pytest.mark.llama
def test_a_template_that_keeps_history_rewrites_nothing(local):
    """The embedded model's own template renders every round's history the same way."""
    check = template.check(agent_log(), local.backend)
    assert len(check.rounds) == 3 and not check.rewrites and all(not r.error for r in check.rounds)
    assert doctor.analyse(agent_log(), local.counter, local.backend).first_break is None
