"""Counting tokens: exactly with a llama-server's tokenizer, or by an estimate that real usage corrects.

A connection carries one (`core.backends.connect.Connection.counter`); documents are fitted to a
budget with it (`core.documents.fit_document`).
"""

from __future__ import annotations

from typing import Protocol

from core.backends.base import CHARS_PER_TOKEN
from core.backends.llama_server import LlamaServerBackend


class TokenCounter(Protocol):
    exact: bool

    def count(self, text: str) -> int: ...

    def truncate(self, text: str, tokens: int) -> str: ...


class ServerTokenCounter:
    """Exact counts from a llama-server's ``/tokenize`` and ``/detokenize``."""

    exact = True

    def __init__(self, backend: LlamaServerBackend) -> None:
        self.backend = backend

    def count(self, text: str) -> int:
        return len(self.backend.tokenize(text))

    def truncate(self, text: str, tokens: int) -> str:
        ids = self.backend.tokenize(text)
        return text if len(ids) <= tokens else self.backend.detokenize(ids[:tokens])


class EstimatingTokenCounter:
    """An estimate for APIs without a tokenizer: characters per token, corrected by real usage."""

    exact = False

    def __init__(self, chars_per_token: float = CHARS_PER_TOKEN) -> None:
        self.chars_per_token = chars_per_token

    def observe(self, chars: int, prompt_tokens: int | None) -> None:
        """Re-estimate from a response's ``usage.prompt_tokens`` for a prompt of ``chars`` characters."""
        if prompt_tokens:
            self.chars_per_token = max(0.5, chars / prompt_tokens)

    def count(self, text: str) -> int:
        return round(len(text) / self.chars_per_token)

    def truncate(self, text: str, tokens: int) -> str:
        return text[: int(tokens * self.chars_per_token)]
