"""Operator settings and keys: ``st.secrets`` first, then the environment."""

from __future__ import annotations

import os

import streamlit as st

from core.backends import PRESETS
from core.hosting import HostedSettings, load_settings


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
