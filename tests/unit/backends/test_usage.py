"""`core.backends.usage`: every provider's usage shape read once, validated at the boundary, and the same
reader behind the clients, the capture proxy's log and the cache doctor."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from core import doctor
from core.backends import AnthropicBackend, ChatRequest, LlamaServerBackend, OpenAICompatBackend
from core.backends.usage import count, find_usage, read_timings, read_usage
from core.capture.log import ResponseWatcher
from core.records import RoundResult

ASK = ChatRequest([{"role": "user", "content": "hi"}])


@pytest.mark.parametrize("usage,expected", [
    ({"prompt_tokens": 2000, "completion_tokens": 5, "prompt_tokens_details": {"cached_tokens": 1920}},
     (2000, 5, 1920, None, "prompt_tokens_details.cached_tokens")),
    ({"input_tokens": 2000, "output_tokens": 7, "input_tokens_details": {"cached_tokens": 1792}},
     (2000, 7, 1792, None, "input_tokens_details.cached_tokens")),
    ({"prompt_tokens": 11, "prompt_tokens_details": {"cached_tokens": 0}, "prompt_cache_hit_tokens": 0,
      "prompt_cache_miss_tokens": 11}, (11, None, 0, None, "prompt_tokens_details.cached_tokens")),
    ({"prompt_cache_hit_tokens": 1984, "prompt_cache_miss_tokens": 16}, (2000, None, 1984, None,
                                                                         "prompt_cache_hit_tokens")),
    ({"prompt_tokens": 3000, "cached_tokens": 2048}, (3000, None, 2048, None, "cached_tokens")),
    ({"input_tokens": 12, "cache_read_input_tokens": 2048, "cache_creation_input_tokens": 100, "output_tokens": 3},
     (2160, 3, 2048, 100, "cache_read_input_tokens")),
    ({"usageMetadata": {"promptTokenCount": 2000, "cachedContentTokenCount": 1500, "candidatesTokenCount": 9}},
     (2000, 9, 1500, None, "cachedContentTokenCount")),
    ({"prompt_tokens_details": None, "prompt_tokens": 3}, (3, None, None, None, "")),
])
def test_every_shape(usage: dict[str, Any], expected: tuple[Any, ...]) -> None:
    counts = read_usage(usage)
    assert (counts.prompt_tokens, counts.completion_tokens, counts.cached_tokens, counts.cache_write_tokens,
            counts.source) == expected
    assert counts.unreadable == []


@pytest.mark.parametrize("value", [True, False, -3, "12", [1], {"n": 1}, float("inf"), float("nan"), 1.5])
def test_what_is_not_a_count_is_named_and_left_out(value: Any) -> None:
    assert count(value) is None
    counts = read_usage({"prompt_tokens": value, "completion_tokens": 4})
    assert counts.prompt_tokens is None and counts.completion_tokens == 4
    assert counts.unreadable == [f"usage.prompt_tokens = {value!r} (not a token count)"]


def test_whole_floats_are_counts_and_impossible_counts_are_said() -> None:
    assert count(12.0) == 12 and count(0) == 0
    assert read_usage({"prompt_tokens": 100, "cached_tokens": 900}).impossible() == (
        "900 cached tokens is more than the 100 prompt tokens")
    timings = read_timings({"prompt_n": 12, "cache_n": 1988, "predicted_n": "x"})
    assert (timings.prompt_tokens, timings.cached_tokens, timings.source) == (2000, 1988, "timings.cache_n")
    assert timings.unreadable == ["timings.predicted_n = 'x' (not a token count)"]


def test_where_usage_sits() -> None:
    chunk = {"choices": [{"usage": {"a": 1}}], "usage": {"b": 2}, "x_groq": {"usage": {"c": 3}},
             "message": {"usage": {"d": 4}}, "response": {"usage": {"e": 5}}}
    assert [where for where, _ in find_usage(chunk)] == ["choices[].usage", "usage", "x_groq.usage", "message.usage",
                                                         "response.usage"]
    assert find_usage({"choices": "not a list", "usage": [1]}) == []


def _sse(*events: dict[str, Any]) -> bytes:
    return b"".join(b"data: " + json.dumps(e).encode() + b"\n\n" for e in events) + b"data: [DONE]\n\n"


def _client(cls: type, body: bytes) -> Any:
    return cls("http://127.0.0.1:9/v1", "m", "k", transport=httpx.MockTransport(
        lambda r: httpx.Response(200, content=body, headers={"content-type": "text/event-stream"})))


BAD = {"prompt_tokens": "many", "completion_tokens": [6], "prompt_tokens_details": {"cached_tokens": 1e999999}}


def test_a_client_records_non_numeric_usage_as_unreadable_and_the_round_still_folds() -> None:
    body = _sse({"choices": [{"delta": {"content": "ok"}, "finish_reason": "stop"}]}, {"choices": [], "usage": BAD})
    result = _client(OpenAICompatBackend, body).stream_chat(ASK)
    assert result.success and result.text == "ok"
    assert (result.prompt_tokens, result.completion_tokens, result.cached_tokens) == (None, None, None)
    assert len(result.unreadable_fields) == 3
    row = RoundResult.from_request("output", 1, result)  # crashed with a TypeError before
    assert "usage.prompt_tokens = 'many'" in row.unreadable_fields and "= inf" in row.unreadable_fields


def test_llama_server_timings_that_are_not_numbers_are_named() -> None:
    timings = {"prompt_n": "x", "cache_n": 5, "prompt_ms": "slow", "predicted_n": 3, "predicted_ms": 30.0}
    body = _sse({"choices": [{"delta": {"content": "ok"}, "finish_reason": "stop"}], "timings": timings})
    result = _client(LlamaServerBackend, body).stream_chat(ASK)
    assert result.success and result.server_prefill_ms is None and result.server_decode_ms == 30.0
    assert result.cached_tokens == 5 and result.recomputed_tokens is None
    assert any("timings.prompt_ms = 'slow'" in f for f in result.unreadable_fields)
    RoundResult.from_request("input", 1, result)


def test_anthropic_usage_through_the_same_reader() -> None:
    start = {"type": "message_start", "message": {"usage": {"input_tokens": "x", "cache_read_input_tokens": 7}}}
    body = _sse(start, {"type": "content_block_delta", "delta": {"type": "text_delta", "text": "Hi"}},
                {"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": True}},
                {"type": "message_stop"})
    result = _client(AnthropicBackend, body).stream_chat(ASK)
    assert result.success and result.prompt_tokens is None and result.completion_tokens is None
    assert result.unreadable_fields == ["message_start.usage.input_tokens = 'x' (not a token count)",
                                        "message_delta.usage.output_tokens = True (not a token count)"]


def test_the_capture_log_and_the_doctor_read_the_same_fields() -> None:
    watcher = ResponseWatcher(0.0)
    watcher.streaming = True
    watcher.feed(_sse({"type": "message_start", "message": {"usage": {"input_tokens": 10,
                                                                      "cache_read_input_tokens": 90}}},
                      {"type": "message_delta", "usage": {"output_tokens": 4}}))
    logged = watcher.result(200)
    assert logged["usage"] == {"input_tokens": 10, "cache_read_input_tokens": 90, "output_tokens": 4}
    measured, problems = doctor.inputs.measured(logged)
    assert measured is not None and (measured.prompt_tokens, measured.cached_tokens) == (100, 90) and not problems
