"""Any OpenAI-compatible streaming API: OpenAI, DeepSeek, OpenRouter, vLLM, SGLang, gateways.

Providers report prefix-cache hits in different places; `core.backends.usage` reads all the shapes
we know of. A provider that reports none leaves ``cached_tokens`` as ``None``: the cache then shows
only in time.
"""

from __future__ import annotations

from core.backends.base import StreamingBackend


class OpenAICompatBackend(StreamingBackend):
    """A hosted or self-hosted OpenAI-compatible API; the cache is read from ``usage``."""
