"""`LlamaServerBackend`'s own endpoints beyond chat: ``/completion`` with token ids (plain and streamed) and
``/slots``, on the real embedded llama-server; the stream's faults on a real HTTP server on 127.0.0.1."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest

from core.backends.llama_server import LlamaServerBackend


def backend_of(local: Any) -> LlamaServerBackend:
    backend = local.backend
    assert isinstance(backend, LlamaServerBackend)
    return backend


def test_a_completion_takes_token_ids_and_recomputes_them_all(local):
    backend = backend_of(local)
    prompt = backend.tokenize("The quick brown fox jumps over the lazy dog. " * 3)
    spent = backend.sent.total
    first = backend.completion(prompt, 1)
    again = backend.completion(prompt, 1)
    assert backend.sent.total - spent == 2 * (len(prompt) + 1)  # charged to a hosted run: prompt and answer
    assert len(first["tokens"]) == 1 and first["tokens"] == again["tokens"]  # greedy: the same token each time
    timings = again["timings"]
    assert (timings["prompt_n"], timings["cache_n"]) == (len(prompt), 0)  # the prompt cache is off


def test_a_streamed_completion_gives_each_token_with_its_running_timings(local):
    backend = backend_of(local)
    prompt = backend.tokenize("The quick brown fox jumps over the lazy dog. " * 3)
    spent = backend.sent.total
    chunks = [c for c in backend.completion_stream(prompt, 5) if c.get("tokens")]
    assert len(chunks) == 5 and all(len(c["tokens"]) == 1 for c in chunks)
    assert backend.sent.total - spent == len(prompt) + 5
    assert [c["timings"]["predicted_n"] for c in chunks] == [1, 2, 3, 4, 5]
    times = [c["timings"]["predicted_ms"] for c in chunks]
    assert times == sorted(times)
    slots = backend.slots()  # at once, after the stream: the server closed that connection (`stream_headers`)
    assert slots is not None and len(slots) == 1
    deadline = time.monotonic() + 120  # the server frees its slot just after the last event: wait for that
    while backend.busy_slots() != 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert backend.busy_slots() == 0
    assert backend.slot_figures() == (len(prompt) + 4, 4096)  # the last token's keys and values not yet computed
    assert chunks[0]["tokens"] == backend.completion(prompt, 1)["tokens"]  # the same greedy answer both ways


class RawCompletion(BaseHTTPRequestHandler):
    """``/completion`` answered with the server's ``body`` as a raw event stream (``status`` 200 unless set)."""

    protocol_version = "HTTP/1.1"
    server: Any

    def log_message(self, *args: Any) -> None:
        pass

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        body: bytes = self.server.body
        self.send_response(self.server.status)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Content-Length", str(len(body) + self.server.missing))  # more than sent: a cut stream
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(body)
        self.close_connection = True


@pytest.fixture()
def raw_server() -> Iterator[ThreadingHTTPServer]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), RawCompletion)
    server.body, server.status, server.missing = b"", 200, 0  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def test_a_token_with_a_unicode_line_break_stays_one_event(raw_server):
    """llama-server writes non-ASCII raw inside JSON: U+2028 must not cut a chunk in two (the shared SSE splitter
    ends lines only at CR and LF)."""
    chunk = json.dumps({"content": "a\u2028b", "tokens": [7]}, ensure_ascii=False)
    raw_server.body = f"data: {chunk}\n\n: comment\n\ndata: [DONE]\n\n".encode()  # type: ignore[attr-defined]
    with LlamaServerBackend(f"http://127.0.0.1:{raw_server.server_port}") as backend:
        assert list(backend.completion_stream([1, 2], 1)) == [{"content": "a\u2028b", "tokens": [7]}]


def test_a_refused_or_cut_stream_raises_for_the_caller_to_record(raw_server):
    with LlamaServerBackend(f"http://127.0.0.1:{raw_server.server_port}") as backend:
        raw_server.status = 500  # type: ignore[attr-defined]
        with pytest.raises(httpx.HTTPStatusError):
            list(backend.completion_stream([1], 1))
        assert backend.sent.total == 0  # refused: nothing charged
        raw_server.status, raw_server.missing = 200, 100  # type: ignore[attr-defined]
        raw_server.body = b'data: {"tokens": [3]}\n\n'  # type: ignore[attr-defined]
        stream = backend.completion_stream([1], 2, timeout=30.0)
        assert next(stream) == {"tokens": [3]}  # what arrived before the cut is read
        with pytest.raises(httpx.HTTPError):
            next(stream)
        assert backend.sent.total == 1 + 1  # charged what reached the server: its prompt and the token that arrived
