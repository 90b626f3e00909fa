"""The app's words in the visitor's language: the sidebar's choice, else the browser's language."""

from __future__ import annotations

import streamlit as st

from ui.content import LANGUAGES, Texts

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
