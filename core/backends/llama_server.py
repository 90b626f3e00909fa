"""llama.cpp's ``llama-server``: the backend that says exactly what it recomputed.

Its final chunk carries ``timings``: ``prompt_n`` tokens recomputed, ``cache_n`` reused from the KV
cache, ``prompt_ms`` of prefill, ``predicted_n``/``predicted_ms`` of decode. With
``return_progress`` the first chunks report prefill progress, which the app shows live.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import httpx

from core.backends.base import ChatRequest
from core.backends.chunks import ProgressCallback, StreamState
from core.backends.openai_compat import OpenAICompatBackend
from core.backends.usage import number
from core.backends.usage import read_timings as usage_of_timings
from core.records import RequestResult


def origin_of(base_url: str) -> str:
    """``http://host:port`` from a base URL that may end in ``/v1``."""
    url = base_url.rstrip("/")
    return url[: -len("/v1")] if url.endswith("/v1") else url


class LlamaServerBackend(OpenAICompatBackend):
    """A llama-server at ``url`` (with or without ``/v1``)."""

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

    def busy_slots(self) -> int | None:
        """How many slots are processing a request now (``/slots``); None when the server does not say (an
        old build, or ``--no-slots``). Asked with the server lock held, a busy slot is another client's."""
        try:
            response = self.client.get(self.origin + "/slots", timeout=2.0)
            slots = response.json() if response.status_code == 200 else None
        except (httpx.HTTPError, ValueError):
            return None
        if not isinstance(slots, list):
            return None
        return sum(1 for s in slots if isinstance(s, dict) and (s.get("is_processing") or s.get("state") == 1))

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
