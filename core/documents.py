"""Documents and token budgets: the default document, an upload read as text, a document cut to a budget.

The default document is Python's own language reference help text (``pydoc_data.topics``), which
ships with every CPython: about 465,000 characters of real technical prose (roughly 110k tokens),
so nothing third-party is bundled.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from core.backends.tokens import TokenCounter
from core.words import Sentence

MAX_UPLOAD_BYTES = 5 * 1024 * 1024


class DocumentError(ValueError):
    """An upload that cannot be used as a document; the message says why."""


@functools.cache
def default_document() -> str:
    """Python's language-reference help topics, in a fixed order."""
    from pydoc_data.topics import topics

    return "\n\n".join(topics[name] for name in sorted(topics))


def read_document(data: bytes, name: str = "upload", max_bytes: int = MAX_UPLOAD_BYTES) -> str:
    """Decode an uploaded text file, or raise `DocumentError` with a message a user can act on."""
    if len(data) > max_bytes:
        raise DocumentError(Sentence("document_refused.too_large", name=name, mb=len(data) / 1e6, most=max_bytes / 1e6))
    if not data.strip():
        raise DocumentError(Sentence("document_refused.empty", name=name))
    if b"\x00" in data[:8192]:
        raise DocumentError(Sentence("document_refused.binary", name=name))
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise DocumentError(Sentence("document_refused.not_utf8", name=name, byte=exc.start)) from None
    return text.replace("\r\n", "\n")


@dataclass
class FittedDocument:
    text: str
    tokens: int
    original_tokens: int
    exact: bool

    @property
    def truncated(self) -> bool:
        return self.tokens < self.original_tokens


def fit_document(text: str, budget_tokens: int, counter: TokenCounter) -> FittedDocument:
    """Cut ``text`` to at most ``budget_tokens`` tokens (at a token boundary when counts are exact)."""
    if budget_tokens <= 0:
        raise DocumentError(Sentence("document_refused.no_room"))
    original = counter.count(text)
    if original <= budget_tokens:
        return FittedDocument(text, original, original, counter.exact)
    cut = counter.truncate(text, budget_tokens)
    return FittedDocument(cut, min(counter.count(cut), budget_tokens), original, counter.exact)


# -- experiments 1 and 2: prompts that cannot hit the cache by accident ----------------------------
