"""A real OpenAI-compatible HTTP server on 127.0.0.1 that misbehaves on request.

The requested ``model`` picks the behaviour, so any client (the CLI, the app, a test) can reach
each fault by naming it: ``ok``, ``401``, ``404``, ``429``, ``500``, ``slow`` (first byte after
``SLOW_SECONDS``), ``cut`` (connection dropped mid-stream), ``garbage`` (malformed JSON chunk),
``no-usage``, ``keepalive`` (SSE comments), ``reasoning`` (reasoning deltas before content),
``no-stream`` (a plain JSON completion), ``echo-key`` (an error body that repeats the key).
Every request body is kept in ``requests`` for assertions.
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

SLOW_SECONDS = 3.0
WORDS = ["Prefill", " reads", " the", " prompt", " once", "."]


def chunk(delta: dict[str, Any] | None = None, finish: str | None = None, **extra: Any) -> bytes:
    body = {"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": delta or {}, "finish_reason": finish}], **extra}
    return b"data: " + json.dumps(body).encode() + b"\n\n"


def usage_chunk(prompt: int, completion: int, cached: int | None) -> bytes:
    usage: dict[str, Any] = {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}
    if cached is not None:
        usage["prompt_tokens_details"] = {"cached_tokens": cached}
    return b"data: " + json.dumps({"choices": [], "usage": usage}).encode() + b"\n\n"


class Handler(BaseHTTPRequestHandler):  # noqa: D101
    server: "FakeOpenAIServer"
    protocol_version = "HTTP/1.1"

    def log_message(self, *args: Any) -> None:
        pass

    def _send_json(self, status: int, body: dict[str, Any], headers: dict[str, str] | None = None) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)

    def _start_stream(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()

    def _write(self, data: bytes) -> None:
        """One HTTP chunk, as real providers frame their streams."""
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    def do_GET(self) -> None:  # /v1/models, for completeness
        self._send_json(200, {"data": [{"id": "ok"}]})

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
        self.server.requests.append({"body": body, "authorization": self.headers.get("Authorization")})
        model = body.get("model", "ok")
        if self.server.fault and len(self.server.requests) > self.server.fault_after:
            model = self.server.fault
        prompt_tokens = sum(len(str(m.get("content", ""))) for m in body.get("messages", [])) // 4
        if model == "401":
            return self._send_json(401, {"error": {"message": "Incorrect API key provided."}})
        if model == "echo-key":
            auth = self.headers.get("Authorization", "")
            return self._send_json(401, {"error": {"message": f"Key {auth.removeprefix('Bearer ')} is not valid."}})
        if model == "404":
            return self._send_json(404, {"error": {"message": "The model `404` does not exist."}})
        if model == "429":
            return self._send_json(429, {"error": {"message": "Rate limit reached."}}, {"Retry-After": "7"})
        if model == "500":
            return self._send_json(500, {"error": {"message": "Internal error."}})
        if model == "no-stream":
            return self._send_json(200, {"choices": [{"message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}],
                                         "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": 1}})
        if model == "slow":
            time.sleep(SLOW_SECONDS)
        self._start_stream()
        if model == "keepalive":
            self._write(b": keep-alive\n\n: OPENROUTER PROCESSING\n\n")
        self._write(chunk({"role": "assistant", "content": None}))
        if model == "reasoning":
            for word in ["Let", " me", " think"]:
                self._write(chunk({"reasoning_content": word}))
        words = WORDS[: max(1, min(len(WORDS), int(body.get("max_tokens", 6))))]
        for index, word in enumerate(words):
            if model == "cut" and index == 3:
                self.wfile.flush()
                self.connection.shutdown(2)
                return
            if model == "garbage" and index == 2:
                self._write(b"data: {not json at all\n\n")
            time.sleep(self.server.token_delay)
            self._write(chunk({"content": word}))
        self._write(chunk({}, finish="length"))
        if model != "no-usage":
            self._write(usage_chunk(prompt_tokens, len(words), self.server.next_cached_tokens(prompt_tokens)))
        self._write(b"data: [DONE]\n\n")
        self.wfile.write(b"0\r\n\r\n")


class FakeOpenAIServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, token_delay: float = 0.005, cached_tokens: int | None = None) -> None:
        super().__init__(("127.0.0.1", 0), Handler)
        self.token_delay = token_delay
        self.cached_tokens = cached_tokens
        self.cached_script: list[int] = []  # per request, first to last; then ``cached_tokens``
        self.fault = ""  # when set, requests after the first ``fault_after`` behave as this model
        self.fault_after = 0
        self.requests: list[dict[str, Any]] = []
        self.thread = threading.Thread(target=self.serve_forever, daemon=True)

    def next_cached_tokens(self, prompt_tokens: int) -> int | None:
        cached = self.cached_script.pop(0) if self.cached_script else self.cached_tokens
        return None if cached is None else min(cached, prompt_tokens)

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # the "cut" fault drops connections on purpose

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/v1"

    def __enter__(self) -> "FakeOpenAIServer":
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()
        self.server_close()
        self.thread.join(5)
