"""A real OpenAI-compatible HTTP server on 127.0.0.1 that misbehaves on request.

The requested ``model`` picks the behaviour, so any client (the CLI, the app, a test) can reach
each fault by naming it: ``ok``, ``401``, ``404``, ``429``, ``500``, ``slow`` (first byte after
``SLOW_SECONDS``), ``cut`` (connection dropped mid-stream), ``garbage`` (malformed JSON chunk),
``no-usage``, ``keepalive`` (SSE comments), ``reasoning`` (reasoning deltas before content),
``list-content`` (Mistral's reasoning models: ``content`` as a list of typed ``thinking``/``text``
parts), ``think`` (DeepSeek-R1 on Groq/Together: ``<think>…</think>`` inline in ``content``),
``no-stream`` (a plain JSON completion), ``echo-key`` (an error body that repeats the key),
``endless`` (tokens that never stop, whatever ``max_tokens`` says), ``ping-only`` (nothing but
``: ping`` comments, forever), ``bad-usage`` (usage counts that are not numbers).

``POST /v1/messages`` answers as Anthropic's Messages API does: ``message_start``,
``content_block_*``, ``ping``, ``message_delta``, ``message_stop`` (model ``anthropic-thinking``
adds a thinking block, ``anthropic-error`` an ``error`` event mid-stream). It keeps a prompt
cache keyed by the text up to each ``cache_control`` breakpoint, so a test sees cache reads and
writes only where the client placed breakpoints (about 4 characters a token).
Every request body is kept in ``requests`` for assertions, and ``received`` is released as each arrives.
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
    choice = {"index": 0, "delta": delta or {}, "finish_reason": finish}
    return b"data: " + json.dumps({"object": "chat.completion.chunk", "choices": [choice], **extra}).encode() + b"\n\n"


def event(name: str, data: dict[str, Any]) -> bytes:
    """One Anthropic-style event: an ``event:`` line and its ``data:`` line."""
    return f"event: {name}\ndata: {json.dumps({'type': name, **data})}\n\n".encode()


def usage_chunk(prompt: int, completion: int, cached: int | None) -> bytes:
    usage: dict[str, Any] = {"prompt_tokens": prompt, "completion_tokens": completion,
                             "total_tokens": prompt + completion}
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
        self.server.requests.append({"body": body, "authorization": self.headers.get("Authorization"),
                                     "headers": dict(self.headers.items()), "path": self.path})
        self.server.received.release()
        if self.path.endswith("/messages"):
            return self._anthropic(body)
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
            answer = {"message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}
            return self._send_json(200, {"choices": [answer], "usage": {"prompt_tokens": prompt_tokens,
                                                                        "completion_tokens": 1}})
        if model == "slow":
            time.sleep(SLOW_SECONDS)
        self._start_stream()
        if model in ("endless", "ping-only"):
            return self._forever(model)
        if model == "keepalive":
            self._write(b": keep-alive\n\n: OPENROUTER PROCESSING\n\n")
        self._write(chunk({"role": "assistant", "content": None}))
        if model == "reasoning":
            for word in ["Let", " me", " think"]:
                self._write(chunk({"reasoning_content": word}))
        if model == "list-content":
            for word in ["Let", " me", " think"]:
                self._write(chunk({"content": [{"type": "thinking", "thinking": [{"type": "text", "text": word}]}]}))
        if model == "think":
            for piece in ["<think>", "\nLet", " me", " think", "\n</think>", "\n\n"]:
                time.sleep(self.server.token_delay)
                self._write(chunk({"content": piece}))
        words = WORDS[: max(1, min(len(WORDS), int(body.get("max_tokens", 6))))]
        for index, word in enumerate(words):
            if model == "cut" and index == 3:
                self.wfile.flush()
                self.connection.shutdown(2)
                return
            if model == "garbage" and index == 2:
                self._write(b"data: {not json at all\n\n")
            time.sleep(self.server.token_delay)
            self._write(chunk({"content": [{"type": "text", "text": word}] if model == "list-content" else word}))
        self._write(chunk({}, finish="length"))
        if model == "bad-usage":
            bad = {"prompt_tokens": "many", "completion_tokens": [6], "prompt_tokens_details": {"cached_tokens": -1}}
            self._write(b"data: " + json.dumps({"choices": [], "usage": bad}).encode() + b"\n\n")
        elif model != "no-usage":
            self._write(usage_chunk(prompt_tokens, len(words), self.server.next_cached_tokens(prompt_tokens)))
        self._write(b"data: [DONE]\n\n")
        self.wfile.write(b"0\r\n\r\n")

    def _forever(self, model: str) -> None:
        """A stream that never ends, until the client goes away."""
        try:
            while True:
                time.sleep(self.server.token_delay)
                self._write(chunk({"content": " more"}) if model == "endless" else b": ping\n\n")
        except OSError:
            return

    def _anthropic(self, body: dict[str, Any]) -> None:
        model = body.get("model", "ok")
        if not self.headers.get("x-api-key"):
            return self._send_json(401, {"type": "error", "error": {"type": "authentication_error",
                                                                    "message": "x-api-key header is required"}})
        fresh, read, written = self.server.anthropic_usage(body)
        self._start_stream()
        self._write(event("message_start", {"message": {"id": "msg_fake", "type": "message", "role": "assistant",
                                                        "model": model, "content": [], "stop_reason": None,
                                                        "usage": {"input_tokens": fresh, "output_tokens": 1,
                                                                  "cache_creation_input_tokens": written,
                                                                  "cache_read_input_tokens": read}}}))
        index = 0
        if model == "anthropic-thinking":
            self._write(event("content_block_start", {"index": 0, "content_block": {"type": "thinking"}}))
            for word in ["Let", " me", " think"]:
                delta = {"type": "thinking_delta", "thinking": word}
                self._write(event("content_block_delta", {"index": 0, "delta": delta}))
            self._write(event("content_block_stop", {"index": 0}))
            index = 1
        self._write(event("content_block_start", {"index": index, "content_block": {"type": "text", "text": ""}}))
        self._write(event("ping", {}))
        words = WORDS[: max(1, min(len(WORDS), int(body.get("max_tokens", 6))))]
        for number, word in enumerate(words):
            if model == "anthropic-error" and number == 2:
                self._write(event("error", {"error": {"type": "overloaded_error", "message": "Overloaded"}}))
                self.wfile.write(b"0\r\n\r\n")
                return
            time.sleep(self.server.token_delay)
            self._write(event("content_block_delta", {"index": index, "delta": {"type": "text_delta", "text": word}}))
        self._write(event("content_block_stop", {"index": index}))
        self._write(event("message_delta", {"delta": {"stop_reason": "max_tokens"},
                                            "usage": {"output_tokens": len(words)}}))
        self._write(event("message_stop", {}))
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
        self.received = threading.Semaphore(0)  # released once per request as it arrives: a test waits on it
        self.anthropic_cache: set[str] = set()  # prompt prefixes written at cache_control breakpoints
        self.thread = threading.Thread(target=self.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    def next_cached_tokens(self, prompt_tokens: int) -> int | None:
        cached = self.cached_script.pop(0) if self.cached_script else self.cached_tokens
        return None if cached is None else min(cached, prompt_tokens)

    def anthropic_usage(self, body: dict[str, Any]) -> tuple[int, int, int]:
        """``(uncached input, cache read, cache write)`` tokens for a Messages request, about 4 characters a token.

        Like Anthropic: the prompt is system blocks then message blocks; from each ``cache_control``
        breakpoint the prefixes ending at the 20 block boundaries before it are looked up, the longest
        one cached by an earlier request is read, and the rest up to the last breakpoint is written.
        """
        text, ends, breakpoints = "", [], []
        blocks = [("system", b) for b in body.get("system") or []]
        blocks += [(m["role"], b) for m in body.get("messages", []) for b in m["content"]]
        for role, block in blocks:
            text += f"[{role}]{block.get('text', '')}"
            ends.append(text)
            if block.get("cache_control"):
                breakpoints.append(len(ends) - 1)
        looked_up = {ends[i] for b in breakpoints for i in range(max(0, b - 20), b + 1)}
        read = max((len(p) for p in looked_up if p in self.anthropic_cache), default=0)
        end = len(ends[breakpoints[-1]]) if breakpoints else 0
        self.anthropic_cache.update(ends[b] for b in breakpoints)
        written = max(end - read, 0)
        return (len(text) - read - written) // 4, read // 4, written // 4

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
