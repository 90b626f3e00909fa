"""Every provider's token usage, read in one place: the clients' streams, the capture proxy's log and the
cache doctor's inputs all call `find_usage` (where a usage object sits in a chunk or body) and
`read_usage` (what it says).

Shapes: OpenAI Chat (``prompt_tokens``, ``completion_tokens``, ``prompt_tokens_details.cached_tokens``;
also xAI, OpenRouter, vLLM, llama-server), OpenAI Responses (``input_tokens``, ``output_tokens``,
``input_tokens_details.cached_tokens``), DeepSeek (``prompt_cache_hit_tokens`` and ``_miss_tokens``),
Moonshot/Kimi and SGLang (top-level ``cached_tokens``), Mistral (``num_cached_tokens``), Anthropic
(``input_tokens`` is the uncached part; ``cache_read_input_tokens`` and ``cache_creation_input_tokens``
come on top), Gemini (``usageMetadata``: ``promptTokenCount``, ``cachedContentTokenCount``) and
llama-server's ``timings`` (``prompt_n`` recomputed, ``cache_n`` reused).

Counts are validated here, at the boundary: a count must be a whole number from 0 up (``true``,
``-3``, ``"12"``, ``[1]``, ``1e999999`` are not). A field that fails is left out and named in
`Usage.unreadable`, so a bad server answer is recorded, never a crash further on; `Usage.impossible`
says when the counts contradict each other.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from core.words import Sentence

ANTHROPIC_CACHE_FIELDS = ("cache_read_input_tokens", "cache_creation_input_tokens")


@dataclass
class Usage:
    """One usage object as counts. ``None``: not reported. ``source`` names the field the cache hit was read from."""

    prompt_tokens: int | None = None  # every prompt token, cached ones included
    completion_tokens: int | None = None
    cached_tokens: int | None = None  # read from the provider's cache
    cache_write_tokens: int | None = None  # Anthropic: written to the cache (billed at a premium)
    recomputed_tokens: int | None = None  # prompt tokens the server computed (llama-server's prompt_n)
    source: str = ""
    unreadable: list[str] = field(default_factory=list)  # "usage.prompt_tokens = 'many' (not a count)"

    def impossible(self) -> str | None:
        """Why the counts contradict each other, if they do: more cached tokens than prompt tokens. (A client
        still records both, as a provider sent them: xAI on Azure counts only uncached tokens as its prompt.)"""
        cached, prompt = self.cached_tokens, self.prompt_tokens
        if cached is not None and prompt is not None and cached > prompt:
            return Sentence("doctor_input_refused.impossible", cached=self.cached_tokens, prompt=self.prompt_tokens)
        return None


def count(value: Any) -> int | None:
    """A token count, or ``None`` when ``value`` is not a whole number from 0 up."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if value >= 0 else None
    if isinstance(value, float) and math.isfinite(value) and value.is_integer() and value >= 0:
        return int(value)
    return None


def number(value: Any) -> float | None:
    """A finite non-negative measurement (milliseconds), or ``None``."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) and value >= 0 else None


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


class _Reader:
    """Reads fields of one object, noting each one present that is not a count."""

    def __init__(self, data: Mapping[str, Any], where: str, usage: Usage) -> None:
        self.data, self.where, self.usage = data, where, usage

    def count(self, *path: str) -> int | None:
        value: Any = self.data
        for key in path:
            if not isinstance(value, Mapping) or key not in value:
                return None
            value = value[key]
        if value is None:
            return None
        result = count(value)
        if result is None:
            where = f"{self.where}.{'.'.join(path)}"
            self.usage.unreadable.append(Sentence("doctor_input_refused.not_count", field=where, value=_shown(value)))
        return result

    def has(self, key: str) -> bool:
        return key in self.data


def read_usage(data: Mapping[str, Any], where: str = "usage") -> Usage:
    """The counts of a usage object (or a Gemini body's ``usageMetadata``) in any provider's shape."""
    usage = Usage()
    meta = data.get("usageMetadata")
    if isinstance(meta, Mapping):
        read = _Reader(meta, f"{where}.usageMetadata" if where != "usage" else "usageMetadata", usage)
        usage.prompt_tokens = read.count("promptTokenCount")
        usage.completion_tokens = read.count("candidatesTokenCount")
        usage.cached_tokens = read.count("cachedContentTokenCount")
        if usage.prompt_tokens is not None and usage.cached_tokens is None and "cachedContentTokenCount" not in meta:
            usage.cached_tokens = 0  # Gemini leaves the field out when nothing was cached
        usage.source = "cachedContentTokenCount"
        return usage
    read = _Reader(data, where, usage)
    if any(read.has(name) for name in ANTHROPIC_CACHE_FIELDS):
        fresh = read.count("input_tokens")
        cache_read = read.count("cache_read_input_tokens")
        written = read.count("cache_creation_input_tokens")
        usage.completion_tokens = read.count("output_tokens")
        if fresh is not None:
            usage.prompt_tokens = fresh + (cache_read or 0) + (written or 0)
            usage.recomputed_tokens = None if cache_read is None else fresh + (written or 0)
        usage.cached_tokens, usage.cache_write_tokens = cache_read, written
        usage.source = "cache_read_input_tokens"
        return usage
    chat = any(read.has(name) for name in ("prompt_tokens", "prompt_tokens_details", "completion_tokens",
                                           "prompt_cache_hit_tokens"))
    total, details, output = (("prompt_tokens", "prompt_tokens_details", "completion_tokens") if chat
                              else ("input_tokens", "input_tokens_details", "output_tokens"))
    usage.prompt_tokens = read.count(total)
    usage.completion_tokens = read.count(output)
    if isinstance(data.get(details), Mapping) and data[details].get("cached_tokens") is not None:
        usage.cached_tokens, usage.source = read.count(details, "cached_tokens"), f"{details}.cached_tokens"
    elif read.has("prompt_cache_hit_tokens"):  # DeepSeek
        usage.cached_tokens, usage.source = read.count("prompt_cache_hit_tokens"), "prompt_cache_hit_tokens"
        miss = read.count("prompt_cache_miss_tokens")
        if usage.prompt_tokens is None and usage.cached_tokens is not None and miss is not None:
            usage.prompt_tokens = usage.cached_tokens + miss
    elif read.has("cached_tokens"):  # Moonshot/Kimi, SGLang
        usage.cached_tokens, usage.source = read.count("cached_tokens"), "cached_tokens"
    elif read.has("num_cached_tokens"):  # Mistral
        usage.cached_tokens, usage.source = read.count("num_cached_tokens"), "num_cached_tokens"
    return usage


def read_timings(timings: Mapping[str, Any], where: str = "timings") -> Usage:
    """llama-server's ``timings``: ``prompt_n`` recomputed and ``cache_n`` reused tokens."""
    usage = Usage()
    read = _Reader(timings, where, usage)
    usage.recomputed_tokens = read.count("prompt_n")
    usage.cached_tokens = read.count("cache_n")
    usage.completion_tokens = read.count("predicted_n")
    if usage.recomputed_tokens is not None and usage.cached_tokens is not None:
        usage.prompt_tokens = usage.recomputed_tokens + usage.cached_tokens
    if usage.cached_tokens is not None:
        usage.source = "timings.cache_n"
    return usage


def find_usage(chunk: Mapping[str, Any]) -> list[tuple[str, Mapping[str, Any]]]:
    """Every usage object in a stream chunk or response body, with where it sits: ``usage``,
    ``choices[].usage`` (Moonshot), ``x_groq.usage`` (Groq's older streams), ``message.usage``
    (Anthropic's ``message_start``), ``response.usage`` (OpenAI Responses events)."""
    found: list[tuple[str, Mapping[str, Any]]] = []
    choices = chunk.get("choices")
    for choice in choices if isinstance(choices, list) else []:
        if isinstance(choice, Mapping) and isinstance(choice.get("usage"), Mapping):
            found.append(("choices[].usage", choice["usage"]))
    if isinstance(chunk.get("usage"), Mapping):
        found.append(("usage", chunk["usage"]))
    for outer in ("x_groq", "message", "response"):
        inner = chunk.get(outer)
        if isinstance(inner, Mapping) and isinstance(inner.get("usage"), Mapping):
            found.append((f"{outer}.usage", inner["usage"]))
    return found
