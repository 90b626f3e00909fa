"""A llama-server-like chat endpoint on 127.0.0.1 with ONE slot and a known service time (experiment 8's tests and
benchmark): requests are served one at a time in the order they arrived, the others wait their turn.

Like llama-server, a stream says when its prompt began (a ``prompt_progress`` chunk with ``time_ms`` 0 as the slot
takes it) and ends with ``timings`` (``prompt_ms``, ``predicted_ms``). Each request's arrival, start and release of
the slot on this process's ``time.perf_counter`` are kept in ``served`` under the tag its user message starts with,
so a test can compute the queue the schedule implies from the actual sends.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


def _data(payload: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(payload).encode() + b"\n\n"


def _delta(content: str | None, finish: str | None = None, **extra: Any) -> bytes:
    return _data({"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {"content": content},
                                                                  "finish_reason": finish}], **extra})


class Handler(BaseHTTPRequestHandler):  # noqa: D101
    server: OneSlotServer
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # as llama-server's HTTP library: a small write is sent at once, not held for an ACK

    def log_message(self, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        data = json.dumps({"status": "ok"}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _write(self, data: bytes) -> None:
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    def do_POST(self) -> None:
        arrived = time.perf_counter()
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
        tag = str(body["messages"][-1]["content"]).split("\n")[0]
        server = self.server
        with server.turn:
            ticket = server.tickets
            server.tickets += 1
            server.turn.wait_for(lambda: server.serving == ticket)
        started = time.perf_counter()
        try:
            self._serve(int(body.get("max_tokens", 4)))
        finally:
            with server.turn:
                server.served[tag] = (arrived, started, time.perf_counter())
                server.serving += 1
                server.turn.notify_all()

    def _serve(self, tokens: int) -> None:
        server = self.server
        started = time.perf_counter()
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        progress = {"total": 100, "cache": 0, "processed": 0, "time_ms": 0}
        self._write(_delta(None, prompt_progress=progress))
        time.sleep(server.prefill_s)
        prompt_ms = (time.perf_counter() - started) * 1000
        self._write(_delta(None, prompt_progress={**progress, "processed": 100, "time_ms": int(prompt_ms)}))
        first = time.perf_counter()
        for index in range(tokens):
            if index:
                time.sleep(server.token_s)
            self._write(_delta(f" w{index}"))
        ended = time.perf_counter()
        timings = {"cache_n": 0, "prompt_n": 100, "prompt_ms": prompt_ms, "predicted_n": tokens,
                   "predicted_ms": (ended - first) * 1000}
        self._write(_delta(None, "length"))
        self._write(_data({"choices": [], "usage": {"prompt_tokens": 100, "completion_tokens": tokens},
                           "timings": timings}))
        self._write(b"data: [DONE]\n\n")
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()


class OneSlotServer(ThreadingHTTPServer):
    """One slot, first come first served; ``prefill_s`` before the first token, ``token_s`` between tokens."""

    daemon_threads = True
    request_queue_size = 128

    def __init__(self, prefill_s: float = 0.05, token_s: float = 0.01) -> None:
        super().__init__(("127.0.0.1", 0), Handler)
        self.prefill_s, self.token_s = prefill_s, token_s
        self.turn = threading.Condition()
        self.tickets = self.serving = 0
        self.served: dict[str, tuple[float, float, float]] = {}  # tag -> (arrived, started, released)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def handle_error(self, request: Any, client_address: Any) -> None:
        """Quiet about resets: a client closes the keep-alive connections its pool does not keep."""
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)

    def __enter__(self) -> OneSlotServer:
        threading.Thread(target=self.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()
        self.server_close()
