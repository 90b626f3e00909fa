"""Any OpenAI-compatible streaming API: OpenAI, DeepSeek, OpenRouter, vLLM, SGLang, gateways.

Providers report prefix-cache hits in different places; `cached_tokens_from_usage` reads all the
shapes we know of. A provider that reports none leaves ``cached_tokens`` as ``None``: the cache
then shows only in time.
"""

from __future__ import annotations

from typing import Any

from core.backends.base import StreamingBackend
from core.records import RequestResult


def _int_or_none(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def cached_tokens_from_usage(usage: dict[str, Any]) -> tuple[int | None, str]:
    """Cache-hit tokens from a usage object and the field they were read from; ``(None, "")`` when
    the provider does not report them.

    Shapes: ``prompt_tokens_details.cached_tokens`` (OpenAI, xAI, OpenRouter, vLLM, llama-server),
    ``prompt_cache_hit_tokens`` (DeepSeek), top-level ``cached_tokens`` (Moonshot/Kimi, SGLang).
    """
    details = usage.get("prompt_tokens_details")
    if isinstance(details, dict) and _int_or_none(details.get("cached_tokens")) is not None:
        return details["cached_tokens"], "prompt_tokens_details.cached_tokens"
    for name in ("prompt_cache_hit_tokens", "cached_tokens"):
        if _int_or_none(usage.get(name)) is not None:
            return usage[name], name
    return None, ""


class OpenAICompatBackend(StreamingBackend):
    """A hosted or self-hosted OpenAI-compatible API; the cache is read from ``usage``."""

    def read_usage(self, usage: dict[str, Any], result: RequestResult, source: str) -> None:
        super().read_usage(usage, result, source)
        cached, name = cached_tokens_from_usage(usage)
        if cached is not None:
            result.cached_tokens = cached
            result.usage_source = f"{source}.{name}"
            if result.prompt_tokens is not None and cached <= result.prompt_tokens:  # else the counts disagree
                result.recomputed_tokens = result.prompt_tokens - cached
