"""JSON held inside a string: what observability tools store in their exports (Langfuse's ``input``, ``output``,
``metadata`` and span attributes; OpenTelemetry attributes such as ``gen_ai.input.messages``). One decoder, bounded
in depth and size, so that a hostile or cut string gives a sentence (`NotJson`) instead of a `RecursionError` or
gigabytes, and the readers never call `json.loads` on a field themselves.
"""

from __future__ import annotations

import functools
import json
import re
from typing import Any

from core.doctor.model import json_problem
from core.words import Sentence, said

MAX_DEPTH = 200  # the deepest real message list nests about 10 levels; Python's own parser stops near 1,000
MAX_CHARS = 64_000_000  # the doctor's whole input is capped below this (inputs.MAX_DOCTOR_BYTES)
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"', re.DOTALL)
_BRACKET = re.compile(r"[\[\]{}]")


class NotJson(ValueError):
    """A string that should hold JSON and does not (cut, too deep, too large, plain text); the message says which
    and where."""


def depth(text: str) -> int:
    """How deep the arrays and objects of a JSON text nest, counted outside its strings; cheap when the text holds
    few brackets (the count of brackets bounds the depth)."""
    if text.count("[") + text.count("{") <= MAX_DEPTH:
        return text.count("[") + text.count("{")
    deepest = level = 0
    for bracket in _BRACKET.finditer(_STRING.sub('""', text)):
        level += 1 if bracket.group() in "[{" else -1
        deepest = max(deepest, level)
    return deepest


@functools.lru_cache(maxsize=4096)
def _cached(text: str) -> Any:
    return json.loads(text)


def loads(text: str, what: str) -> Any:
    """The JSON value a string holds; `NotJson` (naming ``what``) when it is not whole JSON, nests deeper than
    `MAX_DEPTH` or is longer than `MAX_CHARS`. Parsed once per distinct text: an agent's spans repeat their
    tools and parameters, and the readers share (never change) the parsed objects."""
    if len(text) > MAX_CHARS:
        raise NotJson(Sentence("doctor_read.json_long", what=what, n=len(text), most=MAX_CHARS))
    if depth(text) > MAX_DEPTH:
        raise NotJson(Sentence("doctor_read.json_deep", what=what, most=MAX_DEPTH))
    try:
        return _cached(text)
    except (json.JSONDecodeError, RecursionError) as exc:
        message = json_problem(exc, "character") if isinstance(exc, json.JSONDecodeError) \
            else Sentence("doctor_read.too_deep")
        raise NotJson(Sentence("doctor_read.json_cut", what=what, n=len(text), problem=message, end=repr(text[-24:]))
                      ) from None


def looks_like_json(value: Any) -> bool:
    """A string whose first character opens a JSON object or array (a tool's JSON-encoded field)."""
    return isinstance(value, str) and value.lstrip()[:1] in ("{", "[")


def decoded(value: Any, what: str) -> Any:
    """A field as the tool meant it: a string that opens an object or array decoded (`loads`), anything else as
    it is (plain text stays text). Some tools encode twice (Langfuse's trace ``input``: a JSON string of a JSON
    string): a string that decodes to such a string is decoded again, a few times at most."""
    for _ in range(4):
        if looks_like_json(value):
            value = loads(value, what)
        elif isinstance(value, str) and value.startswith('"') and value.endswith('"') and len(value) > 1:
            try:
                value = loads(value, what)
            except NotJson:
                return value  # text that happens to be quoted
        else:
            return value
    return value


def lenient(value: Any, what: str) -> tuple[Any, str | None]:
    """`decoded`, but a string that opens like JSON and is not comes back as the text with the sentence saying
    why, for fields a reader can still use as text."""
    try:
        return decoded(value, what), None
    except NotJson as exc:
        return value, said(exc)
