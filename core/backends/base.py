"""The streaming loop shared by every backend: one request in, one `RequestResult` out.

Timing follows vLLM's benchmark clients: the clock (``time.perf_counter`` unless injected) is read
when the request is sent and again as each line of the stream is read. First byte, first
reasoning delta and the first answer token (TTFT) are kept apart, because a llama-server answers
with a role-only chunk a few milliseconds after the request, long before prefill ends, and
reasoning models think before they answer.

"Never raises" is structural: each chunk is read inside its own guard, so any exception becomes
the round's ``error`` naming the chunk, and what was read before it stays.

A request ends, however the server behaves: at ``deadline_s`` (a stream that never ends, or sends
only ``: ping`` comments, is closed then, with what was read kept; a server that falls silent ends
it by the read timeout, which is never longer than the deadline), and once the server has sent
more answer chunks than the ``max_tokens`` asked for (each chunk holds at least one token).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

import httpx

from core.backends.chunks import ProgressCallback, StreamState, delta_parts
from core.backends.errors import error_text, http_error_message, not_streaming_message, redirect_message
from core.backends.sockets import abortable
from core.backends.sse import LineTooLong, iter_sse_lines, sse_field
from core.backends.usage import Usage, find_usage, number, read_usage
from core.records import RequestResult
from core.secrets import redact, scrubbed
from core.words import Sentence

STOPPED_BY_USER = "Stopped by the user."
# OpenAI's API says, in whole milliseconds, how long it processed a request before its response (llama-cpp-python's
# server sends it too). Others were looked for: TGI's x-queue-time and x-inference-time come only with a response
# that is not streamed (the times are known once it is generated), vLLM's proposed x-vllm-* headers were not merged,
# and Envoy's x-envoy-upstream-service-time includes the network behind the proxy, so none is read.
PROCESSING_HEADER = "openai-processing-ms"
DEFAULT_TIMEOUT = httpx.Timeout(connect=5.0, read=120.0, write=30.0, pool=5.0)
DEFAULT_DEADLINE_S = 600.0  # the longest one request may take, first byte to last (``--deadline``)
CHARS_PER_TOKEN = 4.0  # an estimate's characters per token, where no tokenizer or usage says


class DeadlinePassed(Exception):
    """The request was still streaming at its deadline."""


def apply_usage(result: RequestResult, usage: Usage, source: str) -> None:
    """Copy the counts a usage object reported into ``result``; unreadable fields are named, not used."""
    result.unreadable_fields.extend(usage.unreadable)
    if usage.prompt_tokens is not None:
        result.prompt_tokens = usage.prompt_tokens
    if usage.completion_tokens is not None:
        result.completion_tokens = usage.completion_tokens
    if usage.cache_write_tokens is not None:
        result.cache_write_tokens = usage.cache_write_tokens
    result.usage_source = source
    if usage.cached_tokens is None:
        return
    result.cached_tokens = usage.cached_tokens
    if usage.recomputed_tokens is not None:
        result.recomputed_tokens = usage.recomputed_tokens
    elif result.prompt_tokens is not None and usage.cached_tokens <= result.prompt_tokens:  # else the counts disagree
        result.recomputed_tokens = result.prompt_tokens - usage.cached_tokens


def read_processing(headers: httpx.Headers, result: RequestResult) -> None:
    """The server's own processing time from `PROCESSING_HEADER`, where it sends one; a value that is not a number
    of milliseconds is named in ``unreadable_fields`` and left out."""
    text = headers.get(PROCESSING_HEADER)
    if text is None:
        return
    try:
        value = number(float(text))
    except ValueError:
        value = None
    if value is None:
        result.unreadable_fields.append(f"header {PROCESSING_HEADER} = {text!r:.40} (not a number of milliseconds)")
    else:
        result.server_processing_ms = value


@dataclass
class SentTokens:
    """What a client's requests spent on the server, all requests together: the tokens a hosted run is charged
    (`core.runs.session` takes the difference over the run).

    Counted here, where every request leaves, so every experiment, its warm-up, a level cut by Stop and a stream
    cut halfway are charged alike without each experiment accounting for itself (records are dropped on a stop,
    and a warm-up has none). A request counts once its body reached the server, unless the server refused it
    (a status of 400 or more, or a redirect): its prompt (usage, else the estimate) and the answer tokens that
    arrived (usage, else one per chunk)."""

    total: int = 0
    _guard: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add(self, tokens: int) -> None:
        with self._guard:  # experiments 4 and 8 send from many threads
            self.total += tokens


@dataclass
class Reach:
    """Whether one request reached the server and was not refused: what `SentTokens` charges it for."""

    sent: bool = False  # its body was written to the server (or an answer came, which says as much)
    refused: bool = False  # an answer of 400 or more, or a redirect: the server did no work for it

    def trace(self, name: str, info: dict[str, Any]) -> None:
        """httpcore's ``trace`` extension: the body is on the server's socket once its send completes."""
        self.sent = self.sent or name.endswith("send_request_body.complete")

    def answered(self, response: httpx.Response) -> None:
        self.sent, self.refused = True, response.status_code >= 400 or response.is_redirect

    @property
    def charged(self) -> bool:
        return self.sent and not self.refused


def request_tokens(result: RequestResult, prompt_estimate: int) -> int:
    """One request's tokens that reached the server: its prompt and the answer it received."""
    prompt = result.prompt_tokens if result.prompt_tokens is not None else prompt_estimate
    answer = result.completion_tokens if result.completion_tokens is not None else len(result.chunk_times_s)
    return prompt + answer


def estimated_tokens(messages: list[dict[str, Any]]) -> int:
    """A prompt's tokens by `CHARS_PER_TOKEN` over its messages as JSON (their roles and quoting stand for the
    template's tokens): what a request without usage is charged."""
    return round(len(json.dumps(messages, ensure_ascii=False)) / CHARS_PER_TOKEN)


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
    (`read_chunk_extras`); usage in every provider's shape is read by `core.backends.usage`. A
    different protocol overrides `payload`, `endpoint`, `auth_headers` and `read_chunk` (see
    `core.backends.anthropic`).
    """

    endpoint = "/chat/completions"
    stream_headers: ClassVar[dict[str, str]] = {}  # sent with every streamed request (`LlamaServerBackend`'s)

    def __init__(
        self,
        base_url: str,
        model: str = "",
        api_key: str | None = None,
        *,
        timeout: httpx.Timeout | float | None = None,
        transport: httpx.BaseTransport | None = None,
        clock: Callable[[], float] = time.perf_counter,
        deadline_s: float | None = DEFAULT_DEADLINE_S,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.model = model
        self._api_key = api_key
        self.clock = clock
        self.deadline_s = deadline_s  # None: no deadline beyond the read timeout
        transport, self._sockets = abortable(transport)
        self.client = httpx.Client(timeout=DEFAULT_TIMEOUT if timeout is None else timeout, transport=transport,
                                   headers=self.auth_headers(api_key))
        self.sent = SentTokens()

    # -- description -------------------------------------------------------------------------
    def describe(self) -> dict[str, Any]:
        """Settings safe to export: never the key, only whether one is set."""
        return {"base_url": scrubbed(self.base_url), "model": self.model, "api_key_set": bool(self._api_key)}

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

    def round_trip_url(self) -> str:
        """A cheap GET on the same server (the model list): its answer, whatever its status, times one round trip."""
        return f"{self.base_url}/models"

    def round_trip_ms(self) -> float | None:
        """One GET's round trip to the server in ms, on this client's connections (as AIPerf subtracts from TTFT);
        None when the server cannot be reached."""
        try:
            began = self.clock()
            self.client.get(self.round_trip_url(), timeout=5.0)
            return (self.clock() - began) * 1000
        except httpx.HTTPError:
            return None

    def read_usage(self, usage: Mapping[str, Any], result: RequestResult, source: str) -> None:
        """Token counts from a usage object found at ``source`` (e.g. ``usage``, ``x_groq.usage``); the
        source names the cached-token field too (``usage.prompt_tokens_details.cached_tokens``)."""
        counts = read_usage(usage, source)
        apply_usage(result, counts, f"{source}.{counts.source}" if counts.cached_tokens is not None else source)

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
        timeout = self.client.timeout
        reach = Reach()
        if self.deadline_s is not None and (timeout.read is None or timeout.read > self.deadline_s):
            timeout = httpx.Timeout(timeout.connect, read=self.deadline_s, write=timeout.write, pool=timeout.pool)
        try:
            body = json.dumps(self.payload(request)).encode()
            start = result.sent_at = self.clock()  # the body is encoded before the clock starts
            headers = {"Content-Type": "application/json", **self.stream_headers}
            with self.client.stream("POST", url, content=body, headers=headers, timeout=timeout,
                                    extensions={"trace": reach.trace}) as response:
                reach.answered(response)
                self._answer(response, state, start, cancel, request.max_tokens)
        except httpx.ConnectError as exc:
            result.error = Sentence("backend_error.cannot_connect", url=self.base_url, error=str(exc))
        except httpx.ConnectTimeout:
            result.error = Sentence("backend_error.connect_timeout", url=self.base_url)
        except httpx.ReadTimeout:
            if timeout.read == self.deadline_s:
                result.error = self._deadline_message(state)
            else:
                result.error = (f"The server sent nothing for {timeout.read:g} s (read timeout) "
                                f"after {len(result.chunk_times_s)} chunks.")
        except DeadlinePassed:
            result.error = self._deadline_message(state)
        except LineTooLong as exc:
            result.error = f"The stream was refused after {state.chunks} chunks: {exc}."
        except httpx.RemoteProtocolError as exc:
            result.error = Sentence("backend_error.cut", n=len(result.chunk_times_s), error=str(exc))
        except httpx.HTTPError as exc:
            result.error = Sentence("backend_error.failed", kind=type(exc).__name__, url=self.base_url, error=str(exc))
        except Exception as exc:  # noqa: BLE001 - the promise: a fault ends this round with a message, never the run
            result.error = Sentence("backend_error.broke", kind=type(exc).__name__, n=state.chunks, error=str(exc))
        if result.error and cancel is not None and cancel.is_set():  # `abort` cut the connection: a Stop
            result.error = STOPPED_BY_USER
        if result.end_s is None and result.first_byte_s is not None:
            result.end_s = self.clock() - start
        result.error = redact(result.error, self._api_key)
        result.success = not result.error
        if reach.charged:
            self.sent.add(request_tokens(result, estimated_tokens(request.messages)))
        return result

    def _answer(self, response: httpx.Response, state: StreamState, start: float, cancel: threading.Event | None,
                max_tokens: int) -> None:
        """Read the server's answer: its stream, or the error it answered with."""
        result = state.result
        if response.status_code >= 400:
            response.read()
            result.error = http_error_message(response, self.model)
        elif response.is_redirect:  # never followed: the key would go where the redirect says
            result.error = redirect_message(response)
        elif "text/event-stream" not in response.headers.get("content-type", ""):
            response.read()
            result.error = not_streaming_message(response, self.model)
        else:
            read_processing(response.headers, result)
            self._read_stream(response, state, start, cancel, max_tokens)

    def _deadline_message(self, state: StreamState) -> str:
        sent = (f"after {len(state.result.chunk_times_s)} chunks" if state.chunks
                else "the server had sent only keep-alive comments (`: ping`)" if state.result.first_byte_s is not None
                else "nothing had arrived")
        return (f"The request was still open at its {self.deadline_s:g} s deadline ({sent}); it was ended there, "
                "keeping what was read. Raise the deadline with --deadline if the server is just slow.")

    def _until_deadline(self, chunks: Iterator[bytes]) -> Iterator[bytes]:
        """The network chunks, ending with `DeadlinePassed` once the deadline is past (checked on every chunk,
        so comments or a line that never ends cannot keep the request open)."""
        if self.deadline_s is None:
            yield from chunks
            return
        ends = time.monotonic() + self.deadline_s  # not self.clock: an injected test clock must see only the stream
        for chunk in chunks:
            if time.monotonic() > ends:
                raise DeadlinePassed
            yield chunk

    def _read_stream(self, response: httpx.Response, state: StreamState, start: float,
                     cancel: threading.Event | None, max_tokens: int) -> None:
        result = state.result
        for line in iter_sse_lines(self._until_deadline(response.iter_bytes())):
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
                if not result.error and state.answer_chunks > max_tokens:
                    result.error = (f"The server sent more than the {max_tokens} tokens asked for (max_tokens) "
                                    "without ending the stream; reading stopped there.")
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
        choices = chunk.get("choices")
        for choice in choices if isinstance(choices, list) else []:
            delta = choice.get("delta") or {}
            reasoning, content = delta_parts(delta)
            if reasoning:
                state.reasoning(reasoning, now)
            if content:
                state.answer(content, now)
            if reasoning or content:
                result.chunk_times_s.append(now)
            if choice.get("finish_reason"):
                result.finish_reason = str(choice["finish_reason"])
        for source, usage in find_usage(chunk):
            self.read_usage(usage, result, source)
        self.read_chunk_extras(chunk, result, state.on_progress)
        if chunk.get("error"):  # after the usage: OpenRouter's error chunk still carries it
            result.error = f"The server reported an error mid-stream at chunk {state.chunks}: {error_text(chunk)}"
