"""llama.cpp's ``llama-server``: the backend that says exactly what it recomputed.

Its final chunk carries ``timings``: ``prompt_n`` tokens recomputed, ``cache_n`` reused from the KV
cache, ``prompt_ms`` of prefill, ``predicted_n``/``predicted_ms`` of decode. With
``return_progress`` the first chunks report prefill progress, which the app shows live.

Beyond chat, its own endpoints: ``/props``, ``/slots``, ``/tokenize``, and ``/completion``, which takes and returns
token ids (experiment 6 re-sends an answer token for token through it); their protocol lives here, like the chat
stream's, and a streamed completion is read by the same SSE splitter with the same line cap.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import Any, ClassVar

import httpx

from core.backends.base import ChatRequest
from core.backends.chunks import ProgressCallback, StreamState
from core.backends.openai_compat import OpenAICompatBackend
from core.backends.sse import iter_sse_lines, sse_field
from core.backends.usage import number
from core.backends.usage import read_timings as usage_of_timings
from core.records import RequestResult

COMPLETION_TIMEOUT_S = 300.0  # a raw completion's read timeout: a long prefill on a slow machine sends nothing


def completion_body(prompt: list[int], n_predict: int, cache_prompt: bool) -> dict[str, Any]:
    """Greedy (temperature 0, top-k 1), exactly ``n_predict`` tokens (end of text ignored), token ids back."""
    return {"prompt": prompt, "n_predict": n_predict, "temperature": 0.0, "top_k": 1, "ignore_eos": True,
            "cache_prompt": cache_prompt, "return_tokens": True}


def origin_of(base_url: str) -> str:
    """``http://host:port`` from a base URL that may end in ``/v1``."""
    url = base_url.rstrip("/")
    return url[: -len("/v1")] if url.endswith("/v1") else url


class LlamaServerBackend(OpenAICompatBackend):
    """A llama-server at ``url`` (with or without ``/v1``)."""

    # llama-server closes the connection after a streamed answer although it said keep-alive; a request sent at
    # once on the pooled connection met "Server disconnected" (a /slots read after experiment 6's stream, every
    # time here). Asked to close, the client opens a new one, as the server would have made it do anyway.
    stream_headers: ClassVar[dict[str, str]] = {"Connection": "close"}

    def __init__(self, base_url: str, model: str = "", api_key: str | None = None, **kwargs: Any) -> None:
        self.origin = origin_of(base_url)
        super().__init__(self.origin + "/v1", model, api_key, **kwargs)

    def extra_payload(self, request: ChatRequest) -> dict[str, Any]:
        extra: dict[str, Any] = {"cache_prompt": True, "return_progress": True}
        if request.ignore_eos:
            extra["ignore_eos"] = True
        return extra

    def round_trip_url(self) -> str:
        return self.origin + "/health"

    def read_chunk(self, chunk: dict[str, Any], state: StreamState, now: float) -> None:
        """Also when the server began the prompt: its first ``prompt_progress`` (``time_ms`` since it began, 0 on
        the first) arrives then; a wait in its queue before that is the server's, not the network's."""
        super().read_chunk(chunk, state, now)
        progress = chunk.get("prompt_progress")
        if state.result.prompt_started_s is None and isinstance(progress, Mapping):
            elapsed = number(progress.get("time_ms"))
            if elapsed is not None:
                state.result.prompt_started_s = max(now - elapsed / 1000, 0.0)

    def read_chunk_extras(self, chunk: dict[str, Any], result: RequestResult,
                          on_progress: ProgressCallback | None) -> None:
        progress = chunk.get("prompt_progress")
        if on_progress is not None and isinstance(progress, dict):
            on_progress(progress)
        timings = chunk.get("timings")
        if isinstance(timings, Mapping):
            read_timings(timings, result)

    # -- server endpoints beyond chat ----------------------------------------------------------
    def _get_json(self, method: str, path: str, **kwargs: Any) -> Any:
        response = self.client.request(method, self.origin + path, **kwargs)
        response.raise_for_status()
        return response.json()

    def props(self) -> dict[str, Any]:
        """Context size, model path and build, as ``/props`` reports them."""
        data = self._get_json("GET", "/props")
        settings = data.get("default_generation_settings") or {}
        return {
            "n_ctx": settings.get("n_ctx") or data.get("n_ctx"),
            "model_path": data.get("model_path") or data.get("model_alias", ""),
            "build": data.get("build_info", ""),
            "total_slots": data.get("total_slots"),
            "template_caps": data.get("chat_template_caps") or {},  # what the chat template supports (tools, ...)
        }

    def slots(self, timeout: float = 30.0) -> list[dict[str, Any]] | None:
        """Its slots as ``/slots`` lists them; None when the server does not say (an old build, ``--no-slots``).
        The server answers between two batches of its work, so a busy one on a slow CPU takes seconds: a short
        timeout would read "does not say" where it only had not said yet."""
        try:
            response = self.client.get(self.origin + "/slots", timeout=timeout)
            found = response.json() if response.status_code == 200 else None
        except (httpx.HTTPError, ValueError):
            return None
        return [s for s in found if isinstance(s, dict)] if isinstance(found, list) else None

    def busy_slots(self) -> int | None:
        """How many slots are processing a request now; None when the server does not say. Asked with the server
        lock held, a busy slot is another client's."""
        slots = self.slots()
        return None if slots is None else sum(1 for s in slots if s.get("is_processing") or s.get("state") == 1)

    def slot_figures(self) -> tuple[int | None, int | None]:
        """``(tokens the first slot's cache holds, cells reserved for it)``; Nones where the server does not say.
        Its ``n_prompt_tokens`` counts the answer too (30 prompt ids and 4 answer tokens: 33, the last token's keys
        and values not yet computed)."""
        slots = self.slots() or [{}]
        try:
            return int(slots[0]["n_prompt_tokens"]), int(slots[0]["n_ctx"])
        except (TypeError, IndexError, KeyError, ValueError):
            return None, None

    # -- token ids in, token ids out (``/completion``) ----------------------------------------
    def completion(self, prompt: list[int], n_predict: int, *, cache_prompt: bool = False,
                   timeout: float = COMPLETION_TIMEOUT_S) -> dict[str, Any]:
        """One greedy ``/completion`` of exactly ``n_predict`` tokens after the token ids ``prompt``: the server's
        answer, with its ``tokens`` and ``timings``. Raises `httpx.HTTPError` or `ValueError`."""
        body = completion_body(prompt, n_predict, cache_prompt)
        data = self._get_json("POST", "/completion", json=body, timeout=timeout)
        if not isinstance(data, dict):
            raise ValueError(f"/completion answered {type(data).__name__}, not an object")
        answer = data.get("tokens")
        self.sent.add(len(prompt) + (len(answer) if isinstance(answer, list) else n_predict))
        return data

    def completion_stream(self, prompt: list[int], n_predict: int, *, cache_prompt: bool = False,
                          timeout: float = COMPLETION_TIMEOUT_S) -> Iterator[dict[str, Any]]:
        """The same request streamed with ``timings_per_token``: each ``data:`` event's object as it arrives, read
        by the one SSE splitter (its line cap) within the request deadline. Raises `httpx.HTTPError`, `ValueError`
        (a line over the cap, a chunk that is not JSON) or `core.backends.base.DeadlinePassed`."""
        body = {**completion_body(prompt, n_predict, cache_prompt), "stream": True, "timings_per_token": True}
        with self.client.stream("POST", self.origin + "/completion", json=body, timeout=timeout,
                                headers=self.stream_headers) as response:
            response.raise_for_status()
            received = 0  # charged (`SentTokens`) however the stream ends: its prompt and each token that arrived
            try:
                for line in iter_sse_lines(self._until_deadline(response.iter_bytes())):
                    name, value = sse_field(line) if line else ("", "")
                    if name == "data" and value.strip() and value.strip() != "[DONE]":
                        chunk = json.loads(value)
                        if isinstance(chunk, dict):
                            received += 0 if chunk.get("stop") else 1
                            yield chunk
            finally:
                self.sent.add(len(prompt) + received)

    def tokenize(self, text: str) -> list[int]:
        tokens: list[int] = self._get_json("POST", "/tokenize", json={"content": text, "add_special": False})["tokens"]
        return tokens

    def detokenize(self, tokens: list[int]) -> str:
        return str(self._get_json("POST", "/detokenize", json={"tokens": tokens})["content"])

    def apply_template(self, messages: list[dict[str, Any]], tools: list[Any] | None = None) -> str:
        """The prompt text the model sees for ``messages`` (and ``tools``), rendered with the server's chat template."""
        body: dict[str, Any] = {"messages": messages, **({"tools": tools} if tools else {})}
        return str(self._get_json("POST", "/apply-template", json=body)["prompt"])


TIMING_FIELDS = (("prompt_ms", "server_prefill_ms"), ("predicted_ms", "server_decode_ms"))


def read_timings(timings: Mapping[str, Any], result: RequestResult) -> None:
    """Copy llama-server's ``timings`` into a result (they override usage-derived numbers); a field that
    is not a number is named in ``unreadable_fields`` and left out.

    ``predicted_ms`` covers ``predicted_n - 1`` decode steps (the first token comes out of the prefill
    pass); the server's ``predicted_per_token_ms`` and ``predicted_per_second`` are left unread, as builds
    divide differently (`core.records.decode_timing` says which, and does the division once).
    """
    counts = usage_of_timings(timings)
    result.unreadable_fields.extend(counts.unreadable)
    if counts.recomputed_tokens is not None:
        result.recomputed_tokens = counts.recomputed_tokens
    if counts.cached_tokens is not None:
        result.cached_tokens = counts.cached_tokens
        result.usage_source = counts.source
    if result.recomputed_tokens is not None and result.cached_tokens is not None:
        result.prompt_tokens = result.recomputed_tokens + result.cached_tokens
    if counts.completion_tokens is not None:
        result.server_decode_tokens = counts.completion_tokens
    for name, attr in TIMING_FIELDS:
        if timings.get(name) is None:
            continue
        value = number(timings[name])
        if value is None:
            result.unreadable_fields.append(f"timings.{name} = {timings[name]!r:.40} (not a number of milliseconds)")
        else:
            setattr(result, attr, value)
