"""The format of a log is decided for the whole log, not line by line: from all its lines and a wrapper's
endpoint, or forced with --format; a log that really mixes formats is reported as a mix, never as a break."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from core import doctor
from core.doctor.formats import decide, detect
from tests.support import DATA

CASSETTES = DATA / "doctor" / "cassettes"


def log(*lines: dict) -> bytes:
    return "\n".join(json.dumps(line) for line in lines).encode()


def bodies(name: str) -> list[dict]:
    return [json.loads(line)["request"] for line in (CASSETTES / f"{name}.jsonl").read_text().splitlines()]


def test_a_first_round_without_anthropic_only_fields_is_read_as_the_log_is():
    """pydantic-ai's recorded thinking run: round 1 is a thinking parameter and one text message (nothing only
    Anthropic has), round 2 sends the thinking block back. Read alone, round 1 looks like Chat Completions."""
    first, second = bodies("pydantic-ai__anthropic_model_thinking_part")
    assert "system" not in first and not first.get("tools") and isinstance(first["thinking"], dict)
    assert detect(first) == doctor.CHAT, "alone, the body proves nothing"
    transcript = doctor.load_inputs([("log.jsonl", log(first, second))])
    assert transcript.formats == [doctor.ANTHROPIC] and transcript.mixed is None
    finding = doctor.analyse(transcript).findings[1]
    assert (finding.breaks_cache, finding.cause) == (False, doctor.NONE), "no params_changed for a format flip"


@pytest.mark.parametrize("tool", [{"type": "web_search_20250305", "name": "web_search", "max_uses": 3},
                                  {"type": "memory_20250818", "name": "memory"}])
def test_server_tools_alone_mark_anthropic(tool):
    body = {"model": "claude-sonnet-4-5", "max_tokens": 512, "tools": [tool],
            "messages": [{"role": "user", "content": "What changed in the news today?"}]}
    assert doctor.load_inputs([("log.jsonl", log(body))]).formats == [doctor.ANTHROPIC]


def test_plain_lines_follow_the_lines_that_show_a_format():
    plain = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    anthropic = {**plain, "system": "Be brief.", "messages": plain["messages"] + [
        {"role": "assistant", "content": [{"type": "text", "text": "Hello."}]}, {"role": "user", "content": "More?"}]}
    chat = {**plain, "messages": [{"role": "system", "content": "Be brief."}, *plain["messages"]]}
    assert decide([(plain, ""), (anthropic, "")]) == ([doctor.ANTHROPIC, doctor.ANTHROPIC], None)
    assert decide([(plain, ""), (chat, "")]) == ([doctor.CHAT, doctor.CHAT], None)
    assert decide([(plain, "")]) == ([doctor.CHAT], None), "no evidence at all: Chat Completions, as before"
    wrapped = [{"request": plain, "endpoint": "/v1/messages"}, {"request": plain, "url": "https://x/v1/messages"}]
    assert doctor.load_inputs([("log.jsonl", log(*wrapped))]).formats == [doctor.ANTHROPIC], "the endpoint decides"


@pytest.mark.slow
def test_a_real_mix_is_reported_as_a_mix_never_as_a_break():
    """pydantic-ai's recording of one agent whose history moves from OpenAI Responses to Gemini."""
    transcript = doctor.load_paths([CASSETTES / "pydantic-ai__thinking_with_tool_calls_from_other_model.jsonl"])
    assert transcript.formats == [doctor.GEMINI, doctor.RESPONSES]
    assert "more than one format" in transcript.mixed and "responses: 2" in transcript.mixed
    analysis = doctor.analyse(transcript)
    assert analysis.first_break is None and analysis.findings[2].cause == doctor.FORMAT_CHANGED
    proc = subprocess.run([sys.executable, "-m", "core", "doctor", str(CASSETTES / "pydantic-ai__"
                           "anthropic_server_tool_pass_history_to_another_provider.jsonl")],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "more than one format" in proc.stdout and "never as a cache break" in proc.stdout
    assert "first breaks" not in proc.stdout and "in the tool list" not in proc.stdout


@pytest.mark.slow
def test_format_can_be_forced(tmp_path):
    first, second = bodies("pydantic-ai__anthropic_model_thinking_part")
    path = tmp_path / "log.jsonl"
    path.write_bytes(log(first, {**first, "messages": first["messages"] + [
        {"role": "assistant", "content": "4"}, {"role": "user", "content": "And 3 + 3?"}]}))
    assert doctor.load_paths([path]).formats == [doctor.CHAT]
    assert doctor.load_paths([path], doctor.ANTHROPIC).formats == [doctor.ANTHROPIC]
    out = tmp_path / "out.json"
    proc = subprocess.run([sys.executable, "-m", "core", "doctor", str(path), "--format", doctor.ANTHROPIC,
                           "--json", str(out)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(out.read_text())["format"] == [doctor.ANTHROPIC]
    wrong = doctor.load_paths([path], doctor.GEMINI)
    assert wrong.rounds == [] and wrong.errors == ['log.jsonl line 1: no "contents" list',
                                                   'log.jsonl line 2: no "contents" list'], \
        "a forced format that does not fit names each line"
