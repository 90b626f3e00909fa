"""The streaming loop shared by every backend: one request in, one `RequestResult` out.

Timing follows vLLM's benchmark clients: the clock (``time.perf_counter`` unless injected) is read
when the request is sent and again as each line of the stream is read. First byte, first
reasoning delta and the first answer token (TTFT) are kept apart, because a llama-server answers
with a role-only chunk a few milliseconds after the request, long before prefill ends, and
reasoning models think before they answer.

"Never raises" is structural: each chunk is read inside its own guard, so any exception becomes
the round's ``error`` naming the chunk, and what was read before it stays.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx

from core.backends.chunks import ProgressCallback, StreamState, delta_parts
from core.backends.errors import error_text, http_error_message, not_streaming_message, redirect_message
from core.backends.sockets import abortable
from core.backends.sse import iter_sse_lines, sse_field
from core.records import RequestResult
from core.secrets import redact

STOPPED_BY_USER = "Stopped by the user."
DEFAULT_TIMEOUT = httpx.Timeout(connect=5.0, read=120.0, write=30.0, pool=5.0)


@dataclass
class ChatRequest:
    """A chat-completions request, independent of the backend that serves it."""

    messages: list[dict[str, Any]]
    max_tokens: int = 32
    temperature: float = 0.0
    ignore_eos: bool = False
    extra: dict[str, Any] = field(default_factory=dict)


class StreamingBackend:
    """An OpenAI-compatible ``/chat/completions`` endpoint read as a stream.

    Subclasses add request fields (`extra_payload`) and read provider-specific fields
    (`read_usage`, `read_chunk_extras`); a different protocol overrides `payload`, `endpoint`,
    `auth_headers` and `read_chunk` (see `core.backends.anthropic`).
    """

    endpoint = "/chat/completions"

    def __init__(
        self,
        base_url: str,
        model: str = "",
        api_key: str | None = None,
        *,
        timeout: httpx.Timeout | float | None = None,
        transport: httpx.BaseTransport | None = None,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.model = model
        self._api_key = api_key
        self.clock = clock
        transport, self._sockets = abortable(transport)
        self.client = httpx.Client(timeout=DEFAULT_TIMEOUT if timeout is None else timeout, transport=transport,
                                   headers=self.auth_headers(api_key))

    # -- description -------------------------------------------------------------------------
    def describe(self) -> dict[str, Any]:
        """Settings safe to export: never the key, only whether one is set."""
        return {"base_url": self.base_url, "model": self.model, "api_key_set": bool(self._api_key)}

    def close(self) -> None:
        self.client.close()

    def abort(self) -> None:
        """Cut every open connection now, from any thread: a read waiting on a silent server ends at once
        (Stop), instead of at the read timeout."""
        if self._sockets is not None:
            self._sockets.abort()

    def __enter__(self) -> StreamingBackend:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- hooks ---------------------------------------------------------------------------------
    def auth_headers(self, api_key: str | None) -> dict[str, str]:
        return {"Authorization": f"Bearer {api_key}"} if api_key else {}

    def extra_payload(self, request: ChatRequest) -> dict[str, Any]:
        return {}

    def read_usage(self, usage: dict[str, Any], result: RequestResult, source: str) -> None:
        """Token counts from a usage object found at ``source`` (e.g. ``usage``, ``x_groq.usage``)."""
        result.prompt_tokens = usage.get("prompt_tokens", result.prompt_tokens)
        result.completion_tokens = usage.get("completion_tokens", result.completion_tokens)
        result.usage_source = source

    def read_chunk_extras(self, chunk: dict[str, Any], result: RequestResult,
                          on_progress: ProgressCallback | None) -> None:
        pass

    # -- the request ---------------------------------------------------------------------------
    def payload(self, request: ChatRequest) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": self.model,
            "messages": request.messages,
            "max_tokens": request.max_tokens,
            "temperature": request.temperature,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        body.update(self.extra_payload(request))
        body.update(request.extra)
        return body

    def stream_chat(
        self,
        request: ChatRequest,
        on_progress: ProgressCallback | None = None,
        cancel: threading.Event | None = None,
    ) -> RequestResult:
        """Send one streaming request and measure it. Never raises: every fault becomes ``error``."""
        result = RequestResult()
        state = StreamState(result, on_progress)
        url = f"{self.base_url}{self.endpoint}"
        start = 0.0  # set once the body is encoded; nothing is timed before
        try:
            body = json.dumps(self.payload(request)).encode()
            start = self.clock()  # the body is encoded before the clock starts
            headers = {"Content-Type": "application/json"}
            with self.client.stream("POST", url, content=body, headers=headers) as response:
                if response.status_code >= 400:
                    response.read()
                    result.error = http_error_message(response, self.model)
                elif response.is_redirect:  # never followed: the key would go where the redirect says
                    result.error = redirect_message(response)
                elif "text/event-stream" not in response.headers.get("content-type", ""):
                    response.read()
                    result.error = not_streaming_message(response, self.model)
                else:
                    self._read_stream(response, state, start, cancel)
        except httpx.ConnectError as exc:
            result.error = f"Cannot connect to {self.base_url}: is the server running? ({exc})"
        except httpx.ConnectTimeout:
            result.error = f"Connecting to {self.base_url} timed out."
        except httpx.ReadTimeout:
            read = self.client.timeout.read
            result.error = (f"The server sent nothing for {read:g} s (read timeout) "
                            f"after {len(result.chunk_times_s)} chunks.")
        except httpx.RemoteProtocolError as exc:
            result.error = f"The stream was cut after {len(result.chunk_times_s)} chunks: {exc}"
        except httpx.HTTPError as exc:
            result.error = f"{type(exc).__name__} talking to {self.base_url}: {exc}"
        except Exception as exc:  # noqa: BLE001 - the promise: a fault ends this round with a message, never the run
            result.error = f"{type(exc).__name__} after chunk {state.chunks} of the stream: {exc}"
        if result.error and cancel is not None and cancel.is_set():  # `abort` cut the connection: a Stop
            result.error = STOPPED_BY_USER
        if result.end_s is None and result.first_byte_s is not None:
            result.end_s = self.clock() - start
        result.error = redact(result.error, self._api_key)
        result.success = not result.error
        return result

    def _read_stream(self, response: httpx.Response, state: StreamState, start: float,
                     cancel: threading.Event | None) -> None:
        result = state.result
        for line in iter_sse_lines(response.iter_bytes()):
            now = self.clock() - start
            if result.first_byte_s is None:
                result.first_byte_s = now
            if cancel is not None and cancel.is_set():
                result.error = STOPPED_BY_USER
                break
            name, value = sse_field(line) if line else ("", "")
            if not line:
                state.event = ""  # a blank line ends an event
            elif name == "event":
                state.event = value.strip()
            elif name == "data" and value.strip():
                if value.strip() == "[DONE]":
                    state.done = True
                    break
                state.chunks += 1
                try:
                    self.read_payload(value.strip(), state, now)
                except Exception as exc:  # noqa: BLE001 - one unreadable chunk ends the round, keeping the rest
                    result.error = (f"Chunk {state.chunks} of the stream could not be read "
                                    f"({type(exc).__name__}: {exc}).")
                if result.error or state.done:
                    break
        state.add(state.content.flush())
        result.end_s = self.clock() - start
        if not result.error and not state.done and result.finish_reason is None:
            result.error = (f"The stream was cut after {len(result.chunk_times_s)} chunks: "
                            "it ended with no finish_reason and no [DONE].")

    def read_payload(self, payload: str, state: StreamState, now: float) -> None:
        """Parse one ``data:`` payload as JSON and read it."""
        try:
            chunk = json.loads(payload)
        except json.JSONDecodeError:
            state.result.error = f"Malformed JSON in the stream at chunk {state.chunks}: {payload[:80]!r}"
            return
        if not isinstance(chunk, dict):
            state.result.error = f"Unexpected chunk {state.chunks} in the stream: {payload[:80]!r}"
            return
        self.read_chunk(chunk, state, now)

    def read_chunk(self, chunk: dict[str, Any], state: StreamState, now: float) -> None:
        """One chat-completions chunk: deltas, finish reason, usage wherever it sits, a mid-stream error."""
        result = state.result
        for choice in chunk.get("choices") or []:
            delta = choice.get("delta") or {}
            reasoning, content = delta_parts(delta)
            if reasoning:
                state.reasoning(reasoning, now)
            if content:
                state.answer(content, now)
            if reasoning or content:
                result.chunk_times_s.append(now)
            if choice.get("finish_reason"):
                result.finish_reason = choice["finish_reason"]
            if isinstance(choice.get("usage"), dict):  # Moonshot puts usage inside the choice
                self.read_usage(choice["usage"], result, "choices[].usage")
        if isinstance(chunk.get("usage"), dict):
            self.read_usage(chunk["usage"], result, "usage")
        groq = chunk.get("x_groq")
        if isinstance(groq, dict) and isinstance(groq.get("usage"), dict):  # Groq's older streams
            self.read_usage(groq["usage"], result, "x_groq.usage")
        self.read_chunk_extras(chunk, result, state.on_progress)
        if chunk.get("error"):  # after the usage: OpenRouter's error chunk still carries it
            result.error = f"The server reported an error mid-stream at chunk {state.chunks}: {error_text(chunk)}"
