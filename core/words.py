"""The report's words from ``content/<lang>.toml`` for callers without the app (the CLI).

The app passes its own `ui.text.Texts`, which satisfies `Words` too, so a report downloaded
from a page speaks the visitor's language; both read the same files.
"""

from __future__ import annotations

import re
import tomllib
from functools import cache
from pathlib import Path
from typing import Any, Protocol

CONTENT_DIR = Path(__file__).resolve().parents[1] / "content"
_PHASE_MARK = re.compile(r"\[\[(prefill|decode|cache_hit)\]\]")


class Words(Protocol):
    def __call__(self, key: str, **fmt: Any) -> str:
        """The text at ``section.key``, formatted, phase marks replaced by their words."""


@cache
def _load(lang: str) -> dict[str, Any]:
    with (CONTENT_DIR / f"{lang}.toml").open("rb") as handle:
        data: dict[str, Any] = tomllib.load(handle)
    return data


class ContentWords:
    """`Words` read straight from the content files (English unless told)."""

    def __init__(self, lang: str = "en") -> None:
        self.data = _load(lang if (CONTENT_DIR / f"{lang}.toml").exists() else "en")

    def __call__(self, key: str, **fmt: Any) -> str:
        node: Any = self.data
        for part in key.split("."):
            node = node[part]
        text = str(node).format(**fmt) if fmt else str(node)
        return _PHASE_MARK.sub(lambda m: str(self.data["phase"][m.group(1)]), text).strip()
