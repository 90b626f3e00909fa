"""The app's words (`core.words`, one TOML file per language in ``content/``), in the visitor's language.

Text may mark a phase as ``[[prefill]]``, ``[[decode]]`` or ``[[cache_hit]]``; `Texts.rich` draws
it in that phase's colour (the same as in the charts), `Texts.plain` leaves just the word.

`texts()` is the visitor's language in this session.
"""

from __future__ import annotations

from typing import Any

import streamlit as st

from core.charts.palette import PHASES
from core.hosting import Refused
from core.words import LANGUAGES, PHASE_MARK, ContentWords


class Texts(ContentWords):
    """Look up ``section.key`` in one language; format with keyword arguments; colour the phase words."""

    def rich(self, key: str, **fmt: Any) -> str:
        """Markdown with the phase words coloured (render with ``unsafe_allow_html``)."""
        text = str(self.raw(key)).format(**fmt) if fmt else str(self.raw(key))
        return self.colour(text)

    def colour(self, text: str) -> str:
        return PHASE_MARK.sub(
            lambda m: (
                f"<span style='color:{PHASES[m.group(1)]};font-weight:600'>{self.data['phase'][m.group(1)]}</span>"
            ),
            text,
        ).strip()

    def refusal(self, exc: Refused) -> str:
        """A hosted demo's refusal in this language: its translation under ``[refused]`` (same key, same
        fields), else the English text it carries (`core.hosting.Refused.TEXTS`)."""
        template = self.data.get("refused", {}).get(exc.key)
        return str(template).format(**exc.params) if template else str(exc)



LANG_KEY = "lang"


def browser_language() -> str:
    """``zh`` for a browser whose language is Chinese (``zh``, ``zh-CN``, ``zh-TW``…), else ``en``."""
    locale = (st.context.locale or "").lower()
    return "zh" if locale.startswith("zh") else "en"


def language() -> str:
    """The language in use: chosen in the sidebar this session, else the browser's."""
    lang = st.session_state.get(LANG_KEY) or browser_language()
    return lang if lang in LANGUAGES else "en"


def texts() -> Texts:
    return Texts(language())
