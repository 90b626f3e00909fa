"""The Anthropic Messages backend: request conversion, cache breakpoints, events and usage.

Recorded Anthropic streams are in test_stream_parsing.py; here the fake server answers
``/v1/messages`` over real HTTP on 127.0.0.1 and keeps a prompt cache keyed by the client's
``cache_control`` breakpoints, so experiment 3's reads and writes depend on where they are placed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import httpx
import pytest

from core.backends import BACKENDS, PRESETS, AnthropicBackend, ChatRequest
from core.backends.anthropic import messages_payload
from core.backends.connect import Target, open_connection
from core.conclusions import Conclusion, paragraph
from core.documents import fit_document
from core.experiments import prefix_cache as cache
from core.experiments.base import RunContext
from core.hosting import load_settings
from core.records import RoundResult
from core.words import ContentWords

KEY = "sk-ant-test-0123456789"
REQUEST = ChatRequest([{"role": "system", "content": "You are terse."}, {"role": "user", "content": "hello " * 40}],
                      max_tokens=6)


def anthropic_url(fake_api) -> str:
    return fake_api.base_url  # http://127.0.0.1:PORT/v1: the client posts to /v1/messages


def test_registry_and_preset():
    spec = BACKENDS["anthropic"]
    assert spec.client is AnthropicBackend and spec.hosted and spec.needs == "api"
    preset = PRESETS["Anthropic"]
    assert (preset.backend, preset.base_url, preset.key_env) == ("anthropic", "https://api.anthropic.com/v1",
                                                                  "ANTHROPIC_API_KEY")
    assert preset.model.startswith("claude-haiku-")


def test_hosted_mode_allows_the_preset_by_default():
    settings = load_settings({"PREFILL_LAB_HOSTED": "true"}.get)
    assert "https://api.anthropic.com/v1" in settings.allowed_base_urls


def test_payload_moves_the_system_prompt_and_places_two_breakpoints():
    messages = [{"role": "system", "content": "DOC"}, {"role": "user", "content": "q1"},
                {"role": "assistant", "content": "a1"}, {"role": "user", "content": "q2"}]
    body = messages_payload(messages)
    assert body["system"] == [{"type": "text", "text": "DOC", "cache_control": {"type": "ephemeral"}}]
    assert [m["role"] for m in body["messages"]] == ["user", "assistant", "user"]
    marked = [m["content"][-1].get("cache_control") for m in body["messages"]]
    assert marked == [None, None, {"type": "ephemeral"}]
    assert messages[0] == {"role": "system", "content": "DOC"}, "the shared request is not changed"


def test_headers_body_and_stream_over_http(fake_api):
    with AnthropicBackend(anthropic_url(fake_api), "claude-test", KEY) as backend:
        result = backend.stream_chat(REQUEST)
    assert result.success, result.error
    assert result.text == "Prefill reads the prompt once." and result.finish_reason == "max_tokens"
    sent = fake_api.requests[0]
    assert sent["headers"]["x-api-key"] == KEY and sent["headers"]["anthropic-version"] == "2023-06-01"
    assert sent["authorization"] is None, "the key goes in x-api-key only"
    body = sent["body"]
    assert body["stream"] is True and body["model"] == "claude-test" and body["max_tokens"] == 6
    assert body["system"][0]["text"] == "You are terse." and "stream_options" not in body
    # first round: nothing cached, everything up to the last breakpoint written
    assert (result.cached_tokens, result.cache_write_tokens, result.completion_tokens) == (0, result.prompt_tokens, 6)
    assert result.usage_source == "message_start.usage"  # this message_delta carries output_tokens only


def test_thinking_block_is_reasoning(fake_api):
    with AnthropicBackend(anthropic_url(fake_api), "anthropic-thinking", KEY) as backend:
        result = backend.stream_chat(REQUEST)
    assert result.success and result.reasoning_text == "Let me think"
    assert result.first_reasoning_s < result.ttft_s and not result.reasoning_inline


def test_error_event_mid_stream_keeps_the_text_before_it(fake_api):
    with AnthropicBackend(anthropic_url(fake_api), "anthropic-error", KEY) as backend:
        result = backend.stream_chat(REQUEST)
    assert not result.success and result.text == "Prefill reads"
    assert "error mid-stream" in result.error and "Overloaded" in result.error


def test_missing_key_is_explained(fake_api):
    with AnthropicBackend(anthropic_url(fake_api), "claude-test") as backend:
        result = backend.stream_chat(REQUEST)
    assert not result.success and "HTTP 401" in result.error and "x-api-key header is required" in result.error


def usage_stream(start_usage: dict, delta_usage: dict) -> bytes:
    events = [("message_start", {"message": {"usage": start_usage}}),
              ("content_block_start", {"index": 0, "content_block": {"type": "text", "text": ""}}),
              ("content_block_delta", {"index": 0, "delta": {"type": "text_delta", "text": "Hi"}}),
              ("message_delta", {"delta": {"stop_reason": "end_turn"}, "usage": delta_usage}),
              ("message_stop", {})]
    return b"".join(f"event: {n}\ndata: {json.dumps({'type': n, **d})}\n\n".encode() for n, d in events)


@pytest.mark.parametrize("start,delta,expected", [
    # prompt = input + cache read + cache write; reused = read; recomputed = input + write
    ({"input_tokens": 12, "cache_read_input_tokens": 4000, "cache_creation_input_tokens": 30, "output_tokens": 1},
     {"output_tokens": 5}, (4042, 4000, 42, 30, 5)),
    # no cache fields: "not reported" stays None, never 0
    ({"input_tokens": 50, "output_tokens": 1}, {"output_tokens": 7}, (50, None, None, None, 7)),
])
def test_usage_fields(start, delta, expected):
    body = usage_stream(start, delta)
    transport = httpx.MockTransport(lambda r: httpx.Response(200, content=body,
                                                             headers={"content-type": "text/event-stream"}))
    result = AnthropicBackend("http://127.0.0.1:9/v1", "m", KEY, transport=transport).stream_chat(REQUEST)
    assert result.success, result.error
    got = (result.prompt_tokens, result.cached_tokens, result.recomputed_tokens, result.cache_write_tokens,
           result.completion_tokens)
    assert got == expected
    assert RoundResult.from_request("x", 1, result).cache_write_tokens == expected[3]


def test_experiment_3_reads_from_round_2_with_append_only_and_writes_every_round_with_timestamp_first(fake_api):
    with open_connection(Target("anthropic", anthropic_url(fake_api), "claude-test", KEY)) as conn:
        document = fit_document("Some text about caching. " * 200, 2000, conn.counter)
        rows = list(cache.rounds(RunContext(conn, warm=False), cache.Settings(rounds=3, fitted=document)))
        assert conn.describe()["backend"] == "anthropic" and KEY not in json.dumps(conn.describe())
    append = [r for r in rows if r.strategy == "append_only"]
    stamp = [r for r in rows if r.strategy == "timestamp_first"]
    assert [r.error for r in rows] == [""] * 6
    assert append[0].cached_tokens == 0 and all(r.cached_tokens > 0.9 * r.prompt_tokens for r in append[1:])
    # each round reads all of the previous round's prompt (the breakpoint on its last message), not just the system
    assert all(abs(r.cached_tokens - before.prompt_tokens) <= 2 for before, r in zip(append, append[1:], strict=False))
    assert all(r.cache_write_tokens > 0.9 * r.prompt_tokens for r in stamp)
    assert all(r.cached_tokens == 0 for r in stamp)
    summary = cache.summarize_cache(rows)
    assert summary["timestamp_first"].cache_write_total == sum(r.cache_write_tokens for r in stamp)


@pytest.mark.slow
def test_cli_runs_experiment_3_on_anthropic_and_hides_the_key(fake_api, tmp_path):
    out = tmp_path / "run.json"
    env = {**os.environ, "MY_KEY": KEY}
    proc = subprocess.run([sys.executable, "-m", "core", "--backend", "anthropic", "--url", fake_api.base_url,
                           "--model", "claude-test", "--key-env", "MY_KEY", "--only", "cache", "--rounds", "3",
                           "--doc-tokens", "800", "--json", str(out)],
                          capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(out.read_text())
    assert data["settings"]["backend"] == "anthropic" and data["settings"]["api_key_set"] is True
    stamp = [r for r in data["rounds"] if r["strategy"] == "timestamp_first"]
    assert [r["cached_tokens"] for r in stamp] == [0, 0, 0] and all(r["cache_write_tokens"] for r in stamp)
    assert {r["usage_source"] for r in data["rounds"]} == {"message_start.usage"}
    assert all(r["prefill_source"] == "client" and r["decode_source"] == "client" for r in data["rounds"])
    said = paragraph(Conclusion.from_dict(data["summary"]["cache"]["conclusion"]), ContentWords("en"))
    assert said in proc.stdout and "timestamp first recomputed" in said and "on the 3 rounds both measured" in said
    assert KEY not in proc.stdout + proc.stderr + out.read_text()
    assert all(r["headers"]["x-api-key"] == KEY for r in fake_api.requests)


def test_the_event_line_names_an_event_whose_data_has_no_type():
    body = ('event: message_start\ndata: {"message": {"usage": {"input_tokens": 9, "output_tokens": 1}}}\n\n'
            'event: content_block_delta\ndata: {"index": 0, "delta": {"type": "text_delta", "text": "Hi"}}\n\n'
            'event: message_delta\ndata: {"delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 2}}\n\n'
            'event: message_stop\ndata: {}\n\n').encode()
    transport = httpx.MockTransport(lambda r: httpx.Response(200, content=body,
                                                             headers={"content-type": "text/event-stream"}))
    result = AnthropicBackend("http://127.0.0.1:9/v1", "m", KEY, transport=transport).stream_chat(REQUEST)
    assert result.success, result.error
    got = (result.text, result.prompt_tokens, result.completion_tokens, result.finish_reason)
    assert got == ("Hi", 9, 2, "end_turn")


def test_roles_anthropic_does_not_know_and_empty_answers_are_mapped():
    body = messages_payload([
        {"role": "developer", "content": "Be brief."},
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": ""},
        {"role": "tool", "content": "42"},
    ])
    assert body["system"] == [{"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}}]
    assert [m["role"] for m in body["messages"]] == ["user", "assistant", "user"]
    assert body["messages"][1]["content"] == [{"type": "text", "text": "(empty)"}]  # never an empty text block
    assert body["messages"][2]["content"][-1] == {"type": "text", "text": "42", "cache_control": {"type": "ephemeral"}}
