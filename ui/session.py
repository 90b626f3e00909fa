"""Session state that outlives a page: widget values kept across page switches, and the visitor's key.

Widgets made inside a page are scoped to it, so their values are seeded here and kept in plain
session state; a page's widget then reads its value through its ``key``.
"""

from __future__ import annotations

import os

import streamlit as st

from core.backends import BACKENDS, PRESETS
from core.experiments import EXPERIMENTS
from core.hosting import HostedSettings, load_settings
from ui.text import LANG_KEY, browser_language

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
    first_visit = "preset" not in st.session_state
    for key, default in PERSISTENT.items():
        st.session_state[key] = st.session_state.get(key, default)
    offered = offered_backends(settings)
    if st.session_state[BACKEND_KEY] not in offered:
        st.session_state[BACKEND_KEY] = offered[0]
    if settings.hosted and settings.allowed_base_urls and (
        first_visit or st.session_state["base_url"] not in settings.allowed_base_urls
    ):
        land_on_allowed_preset(settings)


def land_on_allowed_preset(settings: HostedSettings) -> None:
    """A hosted visitor starts on a preset whose base URL is allowed and, best, whose operator key is set, so a
    first Run goes out with a key that belongs to its URL. An allowed URL that no preset has keeps the preset
    and takes the URL (the visitor then brings a key)."""
    allowed = [p for p in PRESETS.values() if p.base_url.rstrip("/") in settings.allowed_base_urls]
    keyed = [p for p in allowed if secret(p.key_env)]
    chosen = next(iter(keyed or allowed), None)
    if chosen is None:
        st.session_state["base_url"] = settings.allowed_base_urls[0]
        return
    st.session_state[BACKEND_KEY] = chosen.backend
    st.session_state["preset"] = chosen.name
    st.session_state["base_url"] = chosen.base_url
    st.session_state["model"] = chosen.model


def presets_for(backend: str, settings: HostedSettings | None = None) -> list[str]:
    """The backend's presets; in hosted mode those whose URL is allowed (all of them when none is)."""
    names = [name for name, preset in PRESETS.items() if preset.backend == backend]
    if settings is not None and settings.hosted:
        allowed = [n for n in names if PRESETS[n].base_url.rstrip("/") in settings.allowed_base_urls]
        return allowed or names
    return names


def apply_preset() -> None:
    """A preset fills in its base URL and model."""
    preset = PRESETS[st.session_state["preset"]]
    st.session_state["base_url"] = preset.base_url
    st.session_state["model"] = preset.model


def keep_preset_of(backend: str, settings: HostedSettings) -> None:
    """After a switch between API backends, choose a preset of the new one (before its widgets exist)."""
    offered = presets_for(backend, settings)
    if offered and st.session_state["preset"] not in offered:
        st.session_state["preset"] = offered[0]
        apply_preset()


def store_key() -> None:
    """Move a typed key out of the widget, so the field is empty again and the key is never echoed."""
    st.session_state[SESSION_KEY] = st.session_state["api_key_input"].strip()
    st.session_state["api_key_input"] = ""


def forget_key() -> None:
    st.session_state.pop(SESSION_KEY, None)


def secret(name: str | None) -> str | None:
    """``st.secrets[name]``, else the environment variable; None when neither is set."""
    if not name:
        return None
    try:
        if name in st.secrets:
            return str(st.secrets[name]) or None
    except (FileNotFoundError, st.errors.StreamlitSecretNotFoundError):
        pass
    return os.environ.get(name) or None


def hosted() -> HostedSettings:
    """The operator's hosted-mode settings (see `core.hosting`)."""
    return load_settings(secret)


def api_key_for(preset_name: str, typed: str | None, base_url: str) -> tuple[str | None, str]:
    """The visitor's typed key, else the operator's for this preset, but only while the base URL is the
    preset's own (an operator's key never goes to another provider's URL); and where it came from
    (``typed``, the variable's name, or "" when there is none)."""
    if typed:
        return typed, "typed"
    preset = PRESETS.get(preset_name)
    if preset is None or base_url.strip().rstrip("/") != preset.base_url.rstrip("/"):
        return None, ""
    key = secret(preset.key_env)
    return key, (preset.key_env or "") if key else ""
