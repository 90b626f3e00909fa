"""Stream parsing through the real code path (`stream_chat` over httpx.MockTransport).

`tests/data/streams/` holds streams recorded from live servers by other projects (sources in
`tests/data/README.md`); the `.sse` files directly in `tests/data/` are written by hand, each for
one shape. Expected values were read off the files (the usage in the last chunks, the line of the
first answer token), not computed by the parser.
"""

from __future__ import annotations

import itertools

import httpx
import pytest

from core.backends import AnthropicBackend, ChatRequest, LlamaServerBackend, OpenAICompatBackend
from core.backends.sse import iter_sse_lines, sse_field
from core.records import RoundResult
from tests.support import DATA

STREAMS = DATA / "streams"
REQUEST = ChatRequest([{"role": "user", "content": "hi"}], max_tokens=4096)  # the recordings answered up to ~1,000
STEP = 0.01


def stepping_clock(step: float = STEP):
    """A clock that advances one step per reading: line ``n`` of a stream is read at ``n * step``."""
    counter = itertools.count()
    return lambda: next(counter) * step


def transport_for(body: bytes | list[bytes], status: int = 200, content_type: str = "text/event-stream",
                  headers: dict | None = None):
    """A transport answering every request with ``body`` (a list: sent as separate network chunks)."""
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        content = iter(body) if isinstance(body, list) else body
        return httpx.Response(status, content=content, headers={"content-type": content_type, **(headers or {})})

    return httpx.MockTransport(handler), seen


def run(source: str | bytes | list[bytes], backend_cls=OpenAICompatBackend, **kwargs):
    """Stream ``source`` (a fixture name, or the bytes themselves) through a backend."""
    body = (DATA / source).read_bytes() if isinstance(source, str) and source.endswith(".sse") else source
    if isinstance(body, str):
        body = body.encode()
    transport, seen = transport_for(body, **kwargs)
    backend = backend_cls("http://127.0.0.1:9/v1", "m", "sk-test-secret-key", transport=transport,
                          clock=stepping_clock())
    return backend.stream_chat(REQUEST), seen


# -- SSE lines -----------------------------------------------------------------------------------
def test_sse_fields():
    assert sse_field(": keep-alive") == ("", " keep-alive")
    assert sse_field("data: [DONE]") == ("data", "[DONE]")
    assert sse_field('data:{"a":1}') == ("data", '{"a":1}')
    assert sse_field("event: message_start") == ("event", "message_start")
    assert sse_field("retry") == ("retry", "")


def test_lines_end_only_at_cr_lf_and_crlf_even_across_network_chunks():
    chunks = [b"a\r", b"\nb\rc\nd\xe2\x80", b"\xa8e\xc2\x85f\r", b"\r\n", b"last"]  # U+2028 and U+0085 split in two
    assert list(iter_sse_lines(chunks)) == ["a", "b", "c", "d\u2028e\u0085f", "", "last"]
    assert list(iter_sse_lines([b"x\r\n\r\n"])) == ["x", ""]


def test_unicode_line_separators_inside_json_do_not_break_a_round():
    """llama-server writes non-ASCII unescaped; a token with U+2028 or U+0085 is valid JSON (hand-edited
    from the recorded llama-server stream)."""
    result, _ = run("llama_server_line_separators.sse", LlamaServerBackend)
    assert result.success, result.error
    assert " important\u2028" in result.text and "q\u0085u" in result.text
    assert (result.prompt_tokens, result.completion_tokens) == (48, 24)


# -- every recorded stream -----------------------------------------------------------------------
# file, finish reason, prompt, completion, reused tokens, usage source, line of the first reasoning
# token, line of the first answer token (TTFT), start and end of the answer text
RECORDED = [
    ("anthropic_haiku.sse", "end_turn", 15, 9, 0, "message_delta.usage", None, 11, "1\n2\n3", "1\n2\n3"),
    ("anthropic_thinking.sse", "end_turn", 43, 282, 0, "message_delta.usage", 11, 62, "Here are the", "streets."),
    # Azure reports more cached tokens than prompt tokens: reused is kept, recomputed is not invented
    ("azure_grok.sse", "stop", 7, 8, 161, "usage.prompt_tokens_details.cached_tokens", None, 1, "1, 2, 3.", "1, 2, 3."),
    ("crusoe_vllm.sse", "stop", 46, 14, 0, "usage.prompt_tokens_details.cached_tokens", None, 3, "1, 2, 3, 4, ",
     " 3, 4, 5"),
    ("deepinfra_llama.sse", "stop", 48, 189, None, "usage", None, 3, "Coca Cola is", "roducts?"),
    ("deepseek_chat.sse", "stop", 11, 8, 0, "usage.prompt_tokens_details.cached_tokens", None, 3, "1, 2, 3.",
     "1, 2, 3."),
    ("deepseek_reasoner.sse", "stop", 6, 212, 0, "usage.prompt_tokens_details.cached_tokens", 3, 399, "Hello there!",
     "u today?"),
    # the answer opens with a whitespace token after reasoning_content: that token is the first answer token
    ("gpustack_qwen3.sse", "stop", 15, 171, 0, "usage.prompt_tokens_details.cached_tokens", 3, 323, "\n\n1, 2, 3.",
     "1, 2, 3."),
    # DeepSeek-R1 on Groq: <think> inline on line 3, </think> on line 911, the answer's first word on line 915;
    # usage only in x_groq.usage
    ("groq_r1_inline_think.sse", "stop", 21, 988, None, "x_groq.usage", 3, 915, "\n\nTo make Ur", "fajores!"),
    ("llama_server_smollm2.sse", "length", 48, 24, 24, "timings.cache_n", None, 7, "Cette phrase", '"\n\nCette'),
    # Magistral: content as a list of typed parts, thinking first
    ("mistral_magistral_list_content.sse", "stop", 10, 232, None, "usage", 5, 121, "To cross the", "rossing."),
    ("mistral_small.sse", "stop", 22, 8, 0, "usage.prompt_tokens_details.cached_tokens", None, 3, "1, 2, 3", "1, 2, 3"),
    ("ollama_cloud_gpt_oss.sse", "stop", 74, 53, None, "usage", 1, 77, "1  \n2  \n3", "  \n2  \n3"),
    ("ollama_qwen3.sse", "stop", 17, 289, None, "usage", 1, 559, "1  \n2  \n3", "  \n2  \n3"),
    ("openai_text.sse", "stop", 78, 9, 0, "usage.prompt_tokens_details.cached_tokens", None, 3, "The capital ",
     " London."),
    ("openai_tool_call.sse", "tool_calls", 53, 15, 0, "usage.prompt_tokens_details.cached_tokens", None, None, "", ""),
    ("openrouter_claude_haiku.sse", "stop", 15, 9, 0, "usage.prompt_tokens_details.cached_tokens", None, 11, "1\n2\n3",
     "1\n2\n3"),
    # a final error chunk that still carries usage: the error ends the round, the usage is kept
    ("openrouter_error_with_usage.sse", "length", 43, 10, 0, "usage.prompt_tokens_details.cached_tokens", 35, None, "",
     ""),
    ("openrouter_reasoning_details.sse", "stop", 43, 36, 0, "usage.prompt_tokens_details.cached_tokens", 9, 27,
     "2 + 2 = 4", " + 2 = 4"),
    ("perplexity_sonar.sse", "stop", 8, 5, None, "usage", None, 1, "1 2 3", "1 2 3"),  # CRLF line ends
    # reasoning only in reasoning_details[]; no finish_reason, but [DONE]
    ("snowflake_reasoning_details.sse", None, 45, 73, 0, "usage.prompt_tokens_details.cached_tokens", 1, 9,
     "15 × 27 = **", " **405**"),
    ("snowflake_text.sse", None, 22, 5, 0, "usage.prompt_tokens_details.cached_tokens", None, 1, "4", "4"),
    # DeepSeek-R1 on Together: <think> alone on line 1, </think> on line 623, the answer on line 627
    ("together_r1_inline_think.sse", "stop", 10, 955, 0, "usage.cached_tokens", 1, 627, "\nCrossing th", " life! 🌟"),
    ("xai_grok_beta.sse", "length", 38, 200, 0, "usage.prompt_tokens_details.cached_tokens", None, 1, "Coca-Cola is",
     "tailored"),
    ("zai_glm_reasoning.sse", "stop", 13, 564, 0, "usage.prompt_tokens_details.cached_tokens", 1, 181, "4", "4"),
]
INLINE_THINK = {"groq_r1_inline_think.sse", "together_r1_inline_think.sse"}
FAILS = {"openrouter_error_with_usage.sse": "The server reported an error mid-stream at chunk 4: Token limit reached"}


def line_of(seconds: float | None) -> int | None:
    """The line of the stream read at ``seconds`` on the stepping clock."""
    return None if seconds is None else round(seconds / STEP)


def backend_for(name: str) -> type:
    return (AnthropicBackend if name.startswith("anthropic") else LlamaServerBackend if name.startswith("llama_server")
            else OpenAICompatBackend)


def test_every_recorded_stream_is_tested_and_has_a_source():
    files = sorted(p.name for p in STREAMS.glob("*.sse"))
    readme = (DATA / "README.md").read_text()
    assert files == sorted(row[0] for row in RECORDED)
    assert [f for f in files if f"`{f}`" not in readme] == []
    assert len(files) >= 15


@pytest.mark.parametrize("name,finish,prompt,completion,reused,source,reasoning_line,ttft_line,head,tail", RECORDED,
                         ids=[row[0] for row in RECORDED])
def test_recorded_stream(name, finish, prompt, completion, reused, source, reasoning_line, ttft_line, head, tail):
    result, _ = run(f"streams/{name}", backend_for(name))
    assert result.error == FAILS.get(name, "")
    assert result.finish_reason == finish
    assert (result.prompt_tokens, result.completion_tokens, result.cached_tokens) == (prompt, completion, reused)
    consistent = reused is not None and prompt is not None and reused <= prompt
    assert result.recomputed_tokens == (prompt - reused if consistent else None)
    assert result.usage_source == source
    assert (line_of(result.first_reasoning_s), line_of(result.ttft_s)) == (reasoning_line, ttft_line)
    assert result.text.startswith(head) and result.text.endswith(tail)
    assert bool(result.reasoning_text) == (reasoning_line is not None)
    assert result.reasoning_inline == (name in INLINE_THINK)
    assert "<think>" not in result.text and "</think>" not in result.text


def test_inline_reasoning_is_the_text_between_the_tags():
    result, _ = run("streams/together_r1_inline_think.sse")
    assert result.reasoning_text.startswith("\nOkay, the user asked") and "</think>" not in result.reasoning_text
    row = RoundResult.from_request("x", 1, result)
    assert row.reasoning_inline and row.first_reasoning_ms == 10.0 and row.ttft_ms == 6270.0


def test_think_tags_split_across_chunks():
    def content(text: str) -> str:
        return 'data: {"choices":[{"delta":{"content":%s}}]}\n\n' % __import__("json").dumps(text)

    pieces = ["<th", "ink>Let me", " think</th", "ink>", "\n\n", "Answer", " here"]
    body = "".join(content(p) for p in pieces) + 'data: {"choices":[{"delta":{},"finish_reason":"stop"}]}\n\n'
    result, _ = run(body)
    assert result.success and result.reasoning_inline
    assert (result.reasoning_text, result.text) == ("Let me think", "\n\nAnswer here")
    assert (round(result.first_reasoning_s / STEP), round(result.ttft_s / STEP)) == (3, 11)  # data lines 2 and 6


def test_whitespace_then_text_stamps_the_first_token():
    body = ('data: {"choices":[{"delta":{"content":" "}}]}\n\ndata: {"choices":[{"delta":{"content":"Hi"}}]}\n\n'
            'data: {"choices":[{"delta":{},"finish_reason":"stop"}]}\n\n')
    result, _ = run(body)
    assert result.text == " Hi" and round(result.ttft_s / STEP) == 1 and not result.reasoning_inline


# -- never raises ------------------------------------------------------------------------------------
def test_an_unreadable_chunk_ends_the_round_naming_it_and_keeps_what_came_before():
    body = ('data: {"choices":[{"delta":{"content":"ok"}}]}\n\n'
            'data: {"choices":[5]}\n\n'
            'data: {"choices":[{"delta":{"content":" lost"}}]}\n\n')
    result, _ = run(body)
    assert not result.success and result.text == "ok"
    assert result.error.startswith("Chunk 2 of the stream could not be read (AttributeError")


def test_a_transport_failure_of_any_kind_becomes_the_error():
    def exploding():
        yield b'data: {"choices":[{"delta":{"content":"ok"}}]}\n\n'
        raise RuntimeError("disk on fire")

    backend = OpenAICompatBackend("http://127.0.0.1:9/v1", "m", transport=httpx.MockTransport(
        lambda r: httpx.Response(200, content=exploding(), headers={"content-type": "text/event-stream"})))
    result = backend.stream_chat(REQUEST)
    assert not result.success and result.text == "ok"
    assert result.error == "RuntimeError after chunk 1 of the stream: disk on fire"


# -- shapes written by hand ---------------------------------------------------------------------------
def test_llama_server_timings_and_progress():
    transport, seen = transport_for((DATA / "llama_server_stream.sse").read_bytes())
    backend = LlamaServerBackend("http://127.0.0.1:9", transport=transport, clock=stepping_clock())
    progress: list[dict] = []
    result = backend.stream_chat(REQUEST, on_progress=progress.append)
    assert result.success, result.error
    assert (result.recomputed_tokens, result.cached_tokens, result.prompt_tokens) == (217, 0, 217)
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
    assert (result.prompt_tokens, result.cached_tokens, result.recomputed_tokens) == (2006, 1920, 86)
    assert result.finish_reason == "stop"
    assert seen[0].headers["authorization"] == "Bearer sk-test-secret-key"
    assert b'"include_usage": true' in seen[0].read().replace(b'":true', b'": true')


def test_deepseek_keepalive_reasoning_then_content():
    result, _ = run("deepseek_reasoner_stream.sse")
    assert result.success
    assert result.reasoning_text == "The user asks" and result.text == "Hi"
    assert result.first_byte_s < result.first_reasoning_s < result.ttft_s
    assert (result.cached_tokens, result.recomputed_tokens) == (960, 40)
    assert result.usage_source == "usage.prompt_cache_hit_tokens"


def test_moonshot_usage_inside_choice():
    result, _ = run("moonshot_stream.sse")
    assert (result.prompt_tokens, result.cached_tokens) == (3000, 2048)
    assert result.usage_source == "choices[].usage.cached_tokens"


def test_openrouter_comments_and_reasoning_field():
    result, _ = run("openrouter_stream.sse")
    assert result.success and result.reasoning_text == "Think" and result.text == "Ok"
    assert result.cached_tokens == 0  # reported as zero, which is not the same as "not reported"


def test_vllm_without_details_and_without_done():
    result, _ = run("vllm_no_details_stream.sse")
    assert result.success, "a finish_reason without [DONE] is a complete stream"
    assert result.prompt_tokens == 120 and result.cached_tokens is None and result.recomputed_tokens is None


def test_gateway_reports_no_cache_field():
    result, _ = run("gateway_usage_only_stream.sse")
    assert result.success and result.prompt_tokens == 107000
    assert result.cached_tokens is None and result.usage_source == "usage"


def test_sglang_top_level_cached_tokens():
    result, _ = run("sglang_stream.sse")
    assert (result.cached_tokens, result.recomputed_tokens) == (768, 32)


def test_stream_that_stops_early_is_an_error_but_keeps_timing():
    result, _ = run("ends_without_finish.sse")
    assert not result.success and "cut after 2 chunks" in result.error
    assert result.text == "Half an" and result.ttft_s is not None and len(result.chunk_times_s) == 2


def test_inter_token_gaps_follow_the_clock():
    result, _ = run("openai_stream.sse")
    assert result.inter_token_s == [pytest.approx(0.02)]  # one blank line between the two content lines


@pytest.mark.parametrize("status,needle", [(401, "API key was rejected"), (404, "model 'm'"), (429, "retry after 7 s"),
                                           (500, "server failed")])
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
    assert not result.success and "Malformed JSON in the stream at chunk 2" in result.error and result.text == "ok"


# -- where each timing comes from ---------------------------------------------------------------------
def test_decode_per_token_is_the_servers_own():
    """This build's timings: predicted_n 4, predicted_ms 34.372, predicted_per_token_ms 11.457 (34.372 / 3:
    the first token comes out of the prefill pass)."""
    result, _ = run("llama_server_stream.sse", backend_cls=LlamaServerBackend)
    row = RoundResult.from_request("x", 1, result)
    assert row.decode_ms == pytest.approx(34.37, abs=0.01)
    assert row.ms_per_output_token == pytest.approx(34.372 / 3, abs=0.001)
    assert (row.prefill_ms, row.prefill_source, row.decode_source) == (pytest.approx(300.44), "server", "server")
    assert row.usage_source == "timings.cache_n"


def test_one_token_answer_has_no_per_token_time():
    """With one token there is no decode step; the server then says 0 ms per token, which is not a measurement."""
    result, _ = run("llama_server_stream.sse", backend_cls=LlamaServerBackend)
    result.server_decode_tokens, result.server_ms_per_output_token = 1, 0.0
    assert RoundResult.from_request("x", 1, result).ms_per_output_token is None


def test_api_timings_come_from_the_stream_clock():
    result, _ = run("streams/openai_text.sse")
    row = RoundResult.from_request("x", 1, result)
    assert (row.prefill_ms, row.prefill_source, row.decode_source) == (None, "client", "client")
    expected_decode = (result.end_s - result.ttft_s) * 1000
    assert row.decode_ms == pytest.approx(expected_decode, abs=0.01)
    assert row.ms_per_output_token == pytest.approx(expected_decode / (9 - 1), abs=0.001)
    assert RoundResult.from_request("x", 1, run("streams/openai_tool_call.sse")[0]).prefill_source is None
