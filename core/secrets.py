"""Keeping API keys out of messages, logs and exports."""

from __future__ import annotations

import os
import re
from typing import Any

from core.words import Sentence

MASK = "***"
# a field named like a key, however it is spelled: api_key, OPENAI_API_KEY, apiKey, x-api-key, access_token,
# Authorization; not max_tokens (plural: a count) nor prompt_cache_key (a routing key OpenAI documents)
_KEY_NAME = re.compile(r"(^(key|auth|token)$|apikey$|secretkey$|privatekey$|accesskey$|token$|secret$|password$"
                       r"|passwd$|authorization$|bearer$|credentials?$|cookie$)")


# a key where no field name says so: in a URL's user information (up to its last @, so an unencoded @ in it is
# masked whole), as a bearer token, or in a provider's own shapes (OpenAI and Anthropic sk-, Google AIza, Groq
# gsk_, xAI xai-, Hugging Face hf_), as a provider's error echoes it
_IN_TEXT = re.compile(r"(?P<user>\b[a-z][a-z0-9+.-]*://[^\s/?#@:]*:)[^\s/?#]*@"
                      r"|(?P<bearer>\bbearer\s+)[^\s\"',;]+"
                      r"|(?<![a-z0-9_-])(?:sk-|sk_|aiza|gsk_|xai-|hf_)[a-z0-9_-]{12,}", re.IGNORECASE)


def scrubbed(text: str) -> str:
    """``text`` with every key it carries where no field name says so masked (a URL's password, a token)."""
    def mask(found: re.Match[str]) -> str:
        if found["user"]:
            return f"{found['user']}{MASK}@"
        return f"{found['bearer'] or ''}{MASK}"

    return _IN_TEXT.sub(mask, text)


def named_like_a_key(name: object) -> bool:
    """Whether a field's name says it holds a key (compared in lower case, without ``_``, ``-`` or spaces)."""
    return bool(_KEY_NAME.search(re.sub(r"[^a-z0-9]", "", str(name).lower())))


def without_keys(value: Any) -> Any:
    """``value`` with every field named like a key removed and every key inside a text masked (`scrubbed`), at
    any depth (no recursion: any nesting works)."""
    def shell(item: Any) -> Any:
        return {} if isinstance(item, dict) else [] if isinstance(item, list | tuple) else \
            scrubbed(item) if isinstance(item, str) else item

    def nested(item: Any) -> bool:
        return isinstance(item, dict | list | tuple)

    top = shell(value)
    stack = [(value, top)] if nested(value) else []
    while stack:
        source, copy = stack.pop()
        pairs = source.items() if isinstance(source, dict) else enumerate(source)
        for name, item in pairs:
            if isinstance(source, dict) and named_like_a_key(name):
                continue
            child = shell(item)
            if isinstance(copy, dict):
                copy[name] = child
            else:
                copy.append(child)
            if nested(item):
                stack.append((item, child))
    return top


def redact(text: str, *secrets: str | None) -> str:
    """Replace every occurrence of each non-empty secret in ``text``, and every key `scrubbed` finds, with ``***``.
    A `Sentence` stays one (its values redacted), so that a page still says it in its language, unless its
    English redacted whole would read otherwise (a secret across a value's edge): then it is that text."""
    plain = str(text)
    for secret in secrets:
        if secret and len(secret) >= 4:
            plain = plain.replace(secret, MASK)
    plain = scrubbed(plain)
    if isinstance(text, Sentence):
        kept = Sentence(text.key, **{name: redact(value, *secrets) if isinstance(value, str) else value
                                     for name, value in text.values.items()})
        if kept == plain:
            return kept
    return plain


def key_from_env(name: str | None) -> str | None:
    """An API key from the named environment variable, or None when unset or blank."""
    if not name:
        return None
    value = os.environ.get(name, "").strip()
    return value or None
