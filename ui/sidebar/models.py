"""The sidebar's model picker: GGUF files local runners already keep (`core.engine.models`), nothing downloaded.

Picking one restarts the embedded llama-server with it: the engine is one process for the whole app,
so the choice is the app's (``LLAMA_MODEL`` of this process), not one visitor's. A 1-3B model shows
decode hitting the bandwidth roof, which the embedded 135M model barely does.
"""

from __future__ import annotations

import os

import streamlit as st

from core.engine.models import FoundModel, find_ggufs
from ui.sidebar.engine import embedded_server, llama_status
from ui.text import Texts

MODEL_KEY = "embedded_model"  # "" = the default model, else a GGUF path
_DEFAULT = ""


@st.cache_data(ttl=60, show_spinner=False)
def _found() -> list[FoundModel]:
    return find_ggufs()


def _switch() -> None:
    """Restart the embedded server with the chosen model."""
    path = st.session_state.get(MODEL_KEY) or _DEFAULT
    if path:
        os.environ["LLAMA_MODEL"] = path
    else:
        os.environ.pop("LLAMA_MODEL", None)
    embedded_server.clear()
    llama_status.clear()


def model_picker(t: Texts) -> None:
    """A select box of the GGUFs found (shown only when there is one besides the default)."""
    found = _found()
    if not found:
        return
    current = os.environ.get("LLAMA_MODEL", _DEFAULT)
    options = [_DEFAULT, *dict.fromkeys([*(str(f.path) for f in found), *([current] if current else [])])]
    labels = {str(f.path): f"{f.path.name} · {f.size_bytes / 1e9:.1f} GB · {f.where}" for f in found}
    st.session_state.setdefault(MODEL_KEY, current)
    st.selectbox(t("sidebar.pick_model"), options, key=MODEL_KEY, on_change=_switch,
                 format_func=lambda p: labels.get(p, p) if p else t("sidebar.default_model"),
                 help=t("sidebar.pick_model_help"))
