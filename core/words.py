"""The words of the app, the report and the CLI, kept as data: one TOML file per language in ``content/``.

Text may mark a phase as ``[[prefill]]``, ``[[decode]]`` or ``[[cache_hit]]``: `ContentWords` leaves just the
phase's word; the app's `ui.text.Texts` (a `ContentWords`) can also draw it in that phase's colour. Callers
without the app (the CLI, a report) use `ContentWords`; the app passes its `Texts`, so a report downloaded
from a page speaks the visitor's language. Both read the files through `load`.
"""

from __future__ import annotations

import re
import tomllib
from functools import cache
from pathlib import Path
from typing import Any, Protocol

CONTENT_DIR = Path(__file__).resolve().parents[1] / "content"
LANGUAGES = ("en", "zh")
PHASE_MARK = re.compile(r"\[\[(prefill|decode|cache_hit)\]\]")


class Words(Protocol):
    def __call__(self, key: str, **fmt: Any) -> str:
        """The text at ``section.key``, formatted, phase marks replaced by their words."""


@cache
def load(lang: str) -> dict[str, Any]:
    """One language's content file, read once."""
    with (CONTENT_DIR / f"{lang}.toml").open("rb") as handle:
        data: dict[str, Any] = tomllib.load(handle)
    return data


class ContentWords:
    """`Words` read straight from the content files (English unless told, or for a language it has not)."""

    def __init__(self, lang: str = "en") -> None:
        self.lang = lang if lang in LANGUAGES else "en"
        self.data = load(self.lang)

    def raw(self, key: str) -> Any:
        node: Any = self.data
        for part in key.split("."):
            node = node[part]
        return node

    def __call__(self, key: str, **fmt: Any) -> str:
        text = str(self.raw(key)).format(**fmt) if fmt else str(self.raw(key))
        return PHASE_MARK.sub(lambda m: str(self.data["phase"][m.group(1)]), text).strip()

    plain = __call__


class Sentence(str):
    """A sentence that core/ says in English (the CLI prints it, a JSON output keeps it) and that keeps its
    words' ``key`` and the ``values`` of its placeholders, so that a page says it in its visitor's language
    (`in_words`). A value may itself be a `Sentence` (a unit such as "LLM spans")."""

    key: str
    values: dict[str, Any]

    def __new__(cls, key: str, **values: Any) -> Sentence:
        said = super().__new__(cls, ContentWords()(key, **values))
        said.key, said.values = key, values
        return said

    def __reduce__(self) -> tuple[Any, ...]:
        return _sentence, (self.key, self.values)


def counted(key: str, n: int, **values: Any) -> Sentence:
    """The sentence at ``key`` said of ``n`` things: the one at ``key_one`` when there is one thing (English's
    singular: "1 trace"; a language without plural forms gives both keys the same words)."""
    said = f"{key}_one" if n == 1 else key
    return Sentence(said, n=n, **values)


def _sentence(key: str, values: dict[str, Any]) -> Sentence:
    return Sentence(key, **values)


def said(exc: BaseException) -> str:
    """What an exception says: its `Sentence` where it carries one (the page then says it in its visitor's
    language), else its text."""
    return exc.args[0] if exc.args and isinstance(exc.args[0], Sentence) else str(exc)


def in_words(text: str, words: Words) -> str:
    """``text`` in the language of ``words`` where it is a `Sentence`, else as it is."""
    if not isinstance(text, Sentence):
        return text
    return words(text.key, **{name: in_words(value, words) if isinstance(value, str) else value
                              for name, value in text.values.items()})
