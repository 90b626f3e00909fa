"""Keeping API keys out of messages, logs and exports."""

from __future__ import annotations

import os

MASK = "***"


def redact(text: str, *secrets: str | None) -> str:
    """Replace every occurrence of each non-empty secret in ``text`` with ``***``."""
    for secret in secrets:
        if secret and len(secret) >= 4:
            text = text.replace(secret, MASK)
    return text


def key_from_env(name: str | None) -> str | None:
    """An API key from the named environment variable, or None when unset or blank."""
    if not name:
        return None
    value = os.environ.get(name, "").strip()
    return value or None
