"""The streaming loop shared by every backend: one request in, one `RequestResult` out.

Timing follows vLLM's benchmark clients: the clock (``time.perf_counter`` unless injected) is read
when the request is sent and again as each line of the stream is read. First byte, first
reasoning delta and first content delta (TTFT) are kept apart, because a llama-server answers
with a role-only chunk a few milliseconds after the request, long before prefill ends.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx

from core.results import RequestResult
from core.secrets import redact
from core.sse import COMMENT, DONE, parse_sse_line

ProgressCallback = Callable[[dict[str, Any]], None]

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
    (`read_usage`, `read_chunk_extras`).
    """

    kind = "base"

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
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.client = httpx.Client(timeout=DEFAULT_TIMEOUT if timeout is None else timeout, transport=transport, headers=headers)

    # -- description -------------------------------------------------------------------------
    def describe(self) -> dict[str, Any]:
        """Settings safe to export: never the key, only whether one is set."""
        return {"backend": self.kind, "base_url": self.base_url, "model": self.model, "api_key_set": bool(self._api_key)}

    def close(self) -> None:
        self.client.close()

    def __enter__(self) -> "StreamingBackend":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- hooks ---------------------------------------------------------------------------------
    def extra_payload(self, request: ChatRequest) -> dict[str, Any]:
        return {}

    def read_usage(self, usage: dict[str, Any], result: RequestResult) -> None:
        result.prompt_tokens = usage.get("prompt_tokens", result.prompt_tokens)
        result.completion_tokens = usage.get("completion_tokens", result.completion_tokens)

    def read_chunk_extras(self, chunk: dict[str, Any], result: RequestResult, on_progress: ProgressCallback | None) -> None:
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
        """Send one streaming request and measure it. Never raises for a network or server fault."""
        result = RequestResult()
        url = f"{self.base_url}/chat/completions"
        body = json.dumps(self.payload(request)).encode()  # encoded before the clock starts
        start = self.clock()
        try:
            with self.client.stream("POST", url, content=body, headers={"Content-Type": "application/json"}) as response:
                if response.status_code >= 400:
                    response.read()
                    result.error = http_error_message(response, self.model)
                elif "text/event-stream" not in response.headers.get("content-type", ""):
                    response.read()
                    result.error = not_streaming_message(response, self.model)
                else:
                    self._read_stream(response, result, start, on_progress, cancel)
        except httpx.ConnectError as exc:
            result.error = f"Cannot connect to {self.base_url}: is the server running? ({exc})"
        except httpx.ConnectTimeout:
            result.error = f"Connecting to {self.base_url} timed out."
        except httpx.ReadTimeout:
            read = self.client.timeout.read
            result.error = f"The server sent nothing for {read:g} s (read timeout) after {len(result.chunk_times_s)} chunks."
        except httpx.RemoteProtocolError as exc:
            result.error = f"The stream was cut after {len(result.chunk_times_s)} chunks: {exc}"
        except httpx.HTTPError as exc:
            result.error = f"{type(exc).__name__} talking to {self.base_url}: {exc}"
        except (ValueError, OSError) as exc:
            result.error = f"{type(exc).__name__}: {exc}"
        result.error = redact(result.error, self._api_key)
        result.success = not result.error
        return result

    def _read_stream(self, response: httpx.Response, result: RequestResult, start: float,
                     on_progress: ProgressCallback | None, cancel: threading.Event | None) -> None:
        saw_done = False
        for line in response.iter_lines():
            now = self.clock() - start
            if result.first_byte_s is None:
                result.first_byte_s = now
            if cancel is not None and cancel.is_set():
                result.error = "Stopped by the user."
                break
            item = parse_sse_line(line)
            if item is None or item is COMMENT:
                continue
            if item is DONE:
                saw_done = True
                break
            try:
                chunk = json.loads(item)
            except json.JSONDecodeError:
                result.error = f"Malformed JSON in the stream after {len(result.chunk_times_s)} chunks: {item[:80]!r}"
                break
            if not isinstance(chunk, dict):
                result.error = f"Unexpected chunk in the stream: {item[:80]!r}"
                break
            if chunk.get("error"):
                result.error = f"The server reported an error mid-stream: {error_text(chunk)}"
                break
            self._read_chunk(chunk, result, now, on_progress)
        result.end_s = self.clock() - start
        if not result.error and not saw_done and result.finish_reason is None:
            result.error = f"The stream was cut after {len(result.chunk_times_s)} chunks: it ended with no finish_reason and no [DONE]."

    def _read_chunk(self, chunk: dict[str, Any], result: RequestResult, now: float, on_progress: ProgressCallback | None) -> None:
        for choice in chunk.get("choices") or []:
            delta = choice.get("delta") or {}
            reasoning = delta.get("reasoning_content") or delta.get("reasoning")
            content = delta.get("content")
            if reasoning:
                if result.first_reasoning_s is None:
                    result.first_reasoning_s = now
                result.reasoning_text += reasoning
                result.chunk_times_s.append(now)
            if content:
                if result.ttft_s is None:
                    result.ttft_s = now
                result.text += content
                result.chunk_times_s.append(now)
            if choice.get("finish_reason"):
                result.finish_reason = choice["finish_reason"]
            if isinstance(choice.get("usage"), dict):  # Moonshot puts usage inside the choice
                self.read_usage(choice["usage"], result)
        if isinstance(chunk.get("usage"), dict):
            self.read_usage(chunk["usage"], result)
        self.read_chunk_extras(chunk, result, on_progress)


def error_text(body: Any) -> str:
    """The human part of an error body: ``error.message`` when there is one."""
    if isinstance(body, dict):
        err = body.get("error", body)
        if isinstance(err, dict):
            return str(err.get("message") or err)[:300]
        return str(err)[:300]
    return str(body)[:300]


def _body_text(response: httpx.Response) -> str:
    try:
        return error_text(response.json())
    except (ValueError, UnicodeDecodeError):
        return response.text[:300].strip()


HTTP_HINTS = {
    400: "the server refused the request",
    401: "the API key was rejected (missing, wrong, or for another provider)",
    403: "the API key may not use this model or endpoint",
    404: "the model or the endpoint does not exist at this base URL",
    408: "the server timed out waiting for the request",
    413: "the prompt is too large for this server",
    429: "rate limited or out of quota",
}


def http_error_message(response: httpx.Response, model: str) -> str:
    status = response.status_code
    hint = HTTP_HINTS.get(status, "the server failed" if status >= 500 else "the request failed")
    if status == 404:
        hint = f"model '{model}' or the endpoint does not exist at this base URL"
    message = f"HTTP {status}: {hint}."
    retry_after = response.headers.get("retry-after")
    if status == 429 and retry_after:
        message += f" The server asks to retry after {retry_after} s."
    body = _body_text(response)
    if status == 400 and "stream" in body.lower():
        message = f"HTTP 400: model '{model}' cannot stream on this server; pick a model that streams."
    return f"{message} Server said: {body}" if body else message


def not_streaming_message(response: httpx.Response, model: str) -> str:
    kind = response.headers.get("content-type", "no content type") or "no content type"
    return (f"Model '{model}' answered with one complete response ({kind}) instead of a stream: "
            "it cannot stream here, so time to first token cannot be measured. Pick a model that streams.")
