"""Stream parsing for each provider's shape, fed recorded bytes through httpx.MockTransport."""

from __future__ import annotations

import itertools
from pathlib import Path

import httpx
import pytest

from core.backends import ChatRequest, LlamaServerBackend, OpenAICompatBackend
from core.backends.openai_compat import cached_tokens_from_usage
from core.results import RoundResult
from core.sse import COMMENT, DONE, parse_sse_line

DATA = Path(__file__).parent / "data"
REQUEST = ChatRequest([{"role": "user", "content": "hi"}])


def stepping_clock(step: float = 0.01):
    """A clock that advances 10 ms per reading: every read line gets a distinct, known time."""
    counter = itertools.count()
    return lambda: next(counter) * step


def recorded(name: str, status: int = 200, content_type: str = "text/event-stream", headers: dict | None = None):
    body = (DATA / name).read_bytes() if name.endswith(".sse") else name.encode()
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(status, content=body, headers={"content-type": content_type, **(headers or {})})

    return httpx.MockTransport(handler), seen


def run(name: str, backend_cls=OpenAICompatBackend, **kwargs):
    transport, seen = recorded(name, **kwargs)
    backend = backend_cls("http://127.0.0.1:9/v1", "m", "sk-test-secret-key", transport=transport, clock=stepping_clock())
    return backend.stream_chat(REQUEST), seen


def test_parse_sse_line_kinds():
    assert parse_sse_line(": keep-alive") is COMMENT
    assert parse_sse_line("data: [DONE]") is DONE
    assert parse_sse_line("data: {\"a\":1}") == '{"a":1}'
    assert parse_sse_line("event: message") is None
    assert parse_sse_line("") is None


def test_llama_server_timings_and_progress():
    transport, seen = recorded("llama_server_stream.sse")
    backend = LlamaServerBackend("http://127.0.0.1:9", transport=transport, clock=stepping_clock())
    progress: list[dict] = []
    result = backend.stream_chat(REQUEST, on_progress=progress.append)
    assert result.success, result.error
    assert (result.recomputed_tokens, result.reused_tokens, result.prompt_tokens) == (217, 0, 217)
    assert result.server_prefill_ms == pytest.approx(300.442)
    assert (result.server_decode_tokens, result.server_decode_ms) == (4, pytest.approx(34.372))
    assert progress and progress[-1]["processed"] == 217
    # the role-only and progress chunks come first: first byte is earlier than the first token
    assert result.first_byte_s < result.ttft_s
    body = seen[0].read()
    assert b'"cache_prompt": true' in body.replace(b'":true', b'": true') and b"return_progress" in body


def test_openai_usage_chunk_with_empty_choices():
    result, seen = run("openai_stream.sse")
    assert result.success and result.text == "Hello there"
    assert (result.prompt_tokens, result.reused_tokens, result.recomputed_tokens) == (2006, 1920, 86)
    assert result.finish_reason == "stop"
    assert seen[0].headers["authorization"] == "Bearer sk-test-secret-key"
    assert b'"include_usage": true' in seen[0].read().replace(b'":true', b'": true')


def test_deepseek_keepalive_reasoning_then_content():
    result, _ = run("deepseek_reasoner_stream.sse")
    assert result.success
    assert result.reasoning_text == "The user asks" and result.text == "Hi"
    assert result.first_byte_s < result.first_reasoning_s < result.ttft_s
    assert (result.reused_tokens, result.recomputed_tokens) == (960, 40)


def test_moonshot_usage_inside_choice():
    result, _ = run("moonshot_stream.sse")
    assert (result.prompt_tokens, result.reused_tokens) == (3000, 2048)


def test_openrouter_comments_and_reasoning_field():
    result, _ = run("openrouter_stream.sse")
    assert result.success and result.reasoning_text == "Think" and result.text == "Ok"
    assert result.reused_tokens == 0  # reported as zero, which is not the same as "not reported"


def test_vllm_without_details_and_without_done():
    result, _ = run("vllm_no_details_stream.sse")
    assert result.success, "a finish_reason without [DONE] is a complete stream"
    assert result.prompt_tokens == 120 and result.reused_tokens is None and result.recomputed_tokens is None


def test_gateway_reports_no_cache_field():
    result, _ = run("gateway_usage_only_stream.sse")
    assert result.success and result.prompt_tokens == 107000
    assert result.reused_tokens is None


def test_sglang_top_level_cached_tokens():
    result, _ = run("sglang_stream.sse")
    assert (result.reused_tokens, result.recomputed_tokens) == (768, 32)


def test_stream_that_stops_early_is_an_error_but_keeps_timing():
    result, _ = run("ends_without_finish.sse")
    assert not result.success and "cut after 2 chunks" in result.error
    assert result.text == "Half an" and result.ttft_s is not None and len(result.chunk_times_s) == 2


def test_inter_token_gaps_follow_the_clock():
    result, _ = run("openai_stream.sse")
    assert result.inter_token_s == [pytest.approx(0.02)]  # one blank line between the two content lines


@pytest.mark.parametrize("status,needle", [(401, "API key was rejected"), (404, "model 'm'"), (429, "retry after 7 s"), (500, "server failed")])
def test_http_errors_are_explained(status, needle):
    result, _ = run('{"error": {"message": "nope sk-test-secret-key"}}', status=status, content_type="application/json",
                    headers={"retry-after": "7"})
    assert not result.success and needle in result.error and "nope" in result.error
    assert "sk-test-secret-key" not in result.error


def test_non_streaming_answer_is_a_clear_error():
    result, _ = run('{"choices": [{"message": {"content": "hi"}}]}', content_type="application/json")
    assert not result.success and "cannot stream" in result.error


def test_garbage_chunk_keeps_what_came_before():
    result, _ = run('data: {"choices":[{"delta":{"content":"ok"}}]}\n\ndata: {oops\n\n')
    assert not result.success and "Malformed JSON" in result.error and result.text == "ok"


def test_cached_tokens_shapes():
    assert cached_tokens_from_usage({"prompt_tokens_details": {"cached_tokens": 5}}) == 5
    assert cached_tokens_from_usage({"prompt_cache_hit_tokens": 64}) == 64
    assert cached_tokens_from_usage({"cached_tokens": 7}) == 7
    assert cached_tokens_from_usage({"prompt_tokens_details": None, "prompt_tokens": 3}) is None


def test_round_from_request_prefers_server_decode_time():
    result, _ = run("llama_server_stream.sse", backend_cls=LlamaServerBackend)
    row = RoundResult.from_request("x", 1, result)
    assert row.decode_ms == pytest.approx(34.372, abs=0.01) and row.ms_per_output_token == pytest.approx(34.372 / 4, rel=1e-3)
    assert row.prefill_ms == pytest.approx(300.44)
