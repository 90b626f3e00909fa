"""The one SSE splitter (`core.backends.sse`): exact line ends, a capped line as a named error, and the
capture proxy reading streams with it."""

from __future__ import annotations

import httpx

from core.backends import ChatRequest, OpenAICompatBackend
from core.backends.sse import LineTooLong, SSELineSplitter, iter_sse_lines
from core.capture.log import ResponseWatcher

USAGE_EVENT = b'data: {"choices":[],"usage":{"prompt_tokens":9,"completion_tokens":2}}'


def test_lines_split_at_cr_lf_crlf_across_chunks_and_keep_a_last_line():
    chunks = [b"a\r", b"\nb\rc\n", b"\xe2\x80", b"\xa8d", b"\r\n", b"tail"]
    assert list(iter_sse_lines(chunks)) == ["a", "b", "c", "\u2028d", "tail"]


def test_a_long_line_in_many_chunks_is_joined_once():
    splitter = SSELineSplitter()
    pieces = [splitter.feed(b"x" * 1000) for _ in range(1000)]
    assert all(p == [] for p in pieces)
    assert splitter.feed(b"\nnext\n") == ["x" * 1_000_000, "next"]


def test_a_line_over_the_cap_is_dropped_as_it_arrives_and_named():
    splitter = SSELineSplitter(max_line_chars=10)
    assert splitter.feed(b"0123456789ABC") == []
    assert splitter._parts == []  # not held: dropped once over the cap
    assert splitter.feed(b"DEF\nok\n") == [None, "ok"]  # the next line is read again
    try:
        list(iter_sse_lines([b"data: " + b"y" * 50 + b"\n"], max_line_chars=20))
    except LineTooLong as exc:
        assert "longer than" in str(exc)
    else:
        raise AssertionError("a line over the cap went through")


def test_the_client_ends_a_round_with_a_line_over_the_cap_naming_it(monkeypatch):
    body = [b'data: {"choices":[{"delta":{"content":"ok"}}]}\n\n', b"data: " + b"z" * 5000 + b"\n\n"]

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=iter(body), headers={"content-type": "text/event-stream"})

    monkeypatch.setattr("core.backends.base.iter_sse_lines",
                        lambda chunks: iter_sse_lines(chunks, max_line_chars=1000))
    backend = OpenAICompatBackend("http://127.0.0.1:9/v1", "m", transport=httpx.MockTransport(handler))
    result = backend.stream_chat(ChatRequest([{"role": "user", "content": "hi"}]))
    assert not result.success and result.text == "ok"
    assert "longer than 0.001 MB" in result.error and "after 1 chunks" in result.error


def test_the_capture_proxy_splits_streams_as_the_clients_do():
    """CR-only line ends are SSE too: the proxy used to split on LF only and missed this usage."""
    watcher = ResponseWatcher(0.0)
    watcher.streaming = True
    for piece in (b'data: {"choices":[{"delta":{"content":"hi"}}]}\r\r', USAGE_EVENT[:20], USAGE_EVENT[20:] + b"\r\r"):
        watcher.feed(piece)
    record = watcher.result(200)
    assert record["usage"] == {"prompt_tokens": 9, "completion_tokens": 2}
    assert record["ttft_ms"] is not None
