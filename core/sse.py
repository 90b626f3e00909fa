"""Server-sent events, read line by line as OpenAI-compatible servers send them."""

from __future__ import annotations

COMMENT = object()
DONE = object()


def parse_sse_line(line: str) -> object | str | None:
    """Classify one line of an event stream.

    Returns ``None`` for a blank or non-data line, ``COMMENT`` for a comment (``: keep-alive``,
    ``: OPENROUTER PROCESSING``), ``DONE`` for ``data: [DONE]``, else the data payload text.
    """
    if not line:
        return None
    if line.startswith(":"):
        return COMMENT
    if not line.startswith("data:"):
        return None  # "event:", "id:", "retry:" lines carry nothing we time
    payload = line[5:].strip()
    if payload == "[DONE]":
        return DONE
    return payload or None
