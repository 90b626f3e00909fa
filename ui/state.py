"""Session state that outlives a page: widget values kept across page switches, and the visitor's key.

Widgets made inside a page are scoped to it, so their values are seeded here and kept in plain
session state; a page's widget then reads its value through its ``key``.
"""

from __future__ import annotations

import streamlit as st

from core.backends import BACKENDS, PRESETS
from core.experiments.registry import EXPERIMENTS
from core.hosting import HostedSettings
from ui.texts import LANG_KEY, browser_language

BACKEND_KEY = "backend"  # the chosen `core.backends.BACKENDS` name
SESSION_KEY = "session_api_key"  # the visitor's key: plain session state, never a widget value sent back
DEFAULT_PRESET = "AI Builder Space"

PERSISTENT = {
    BACKEND_KEY: "local", "llama_url": "http://127.0.0.1:8080", "preset": DEFAULT_PRESET,
    "base_url": PRESETS[DEFAULT_PRESET].base_url, "model": PRESETS[DEFAULT_PRESET].model,
    # the experiment pages' settings (``cache_rounds``): seeded here, not in the widgets, so they also survive
    # page switches
    **{key: value for spec in EXPERIMENTS.values() for key, value in spec.session_defaults().items()},
}


def offered_backends(settings: HostedSettings) -> list[str]:
    """The registry's backends this deploy offers (hosted: the APIs only)."""
    return [name for name, spec in BACKENDS.items() if spec.hosted or not settings.hosted]


def keep_widget_state(settings: HostedSettings) -> None:
    """Seed every persistent value once (the language from the browser) and keep hosted choices valid."""
    st.session_state[LANG_KEY] = st.session_state.get(LANG_KEY) or browser_language()
    for key, default in PERSISTENT.items():
        st.session_state[key] = st.session_state.get(key, default)
    offered = offered_backends(settings)
    if st.session_state[BACKEND_KEY] not in offered:
        st.session_state[BACKEND_KEY] = offered[0]
    if (
        settings.hosted
        and settings.allowed_base_urls
        and st.session_state["base_url"] not in settings.allowed_base_urls
    ):
        st.session_state["base_url"] = settings.allowed_base_urls[0]


def presets_for(backend: str) -> list[str]:
    return [name for name, preset in PRESETS.items() if preset.backend == backend]


def apply_preset() -> None:
    """A preset fills in its base URL and model."""
    preset = PRESETS[st.session_state["preset"]]
    st.session_state["base_url"] = preset.base_url
    st.session_state["model"] = preset.model


def keep_preset_of(backend: str) -> None:
    """After a switch between API backends, choose a preset of the new one (before its widgets exist)."""
    offered = presets_for(backend)
    if offered and st.session_state["preset"] not in offered:
        st.session_state["preset"] = offered[0]
        apply_preset()


def store_key() -> None:
    """Move a typed key out of the widget, so the field is empty again and the key is never echoed."""
    st.session_state[SESSION_KEY] = st.session_state["api_key_input"].strip()
    st.session_state["api_key_input"] = ""


def forget_key() -> None:
    st.session_state.pop(SESSION_KEY, None)
