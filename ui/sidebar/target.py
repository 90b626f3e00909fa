"""The backend the sidebar points at, as a `core.backends.connect.Target`, and connecting to it safely."""

from __future__ import annotations

import streamlit as st

from core.backends import API, BACKENDS, ENGINE
from core.backends.connect import Connection, Target, open_connection
from core.hosting import check_base_url, guarded_transport
from ui.session import BACKEND_KEY, SESSION_KEY, api_key_for, hosted, offered_backends
from ui.sidebar.engine import embedded_server


def current_target(slots: int = 1) -> Target:
    """The backend chosen in the sidebar (starting the embedded server with ``slots`` if it is the one)."""
    name = st.session_state.get(BACKEND_KEY, "local")
    if name not in offered_backends(hosted()):
        name = offered_backends(hosted())[0]
    spec = BACKENDS[name]
    if spec.needs == ENGINE:
        return Target(name, url=embedded_server(slots).url)
    if spec.needs != API:
        return Target(name, url=st.session_state["llama_url"].strip())
    key, _ = api_key_for(st.session_state["preset"], st.session_state.get(SESSION_KEY), st.session_state["base_url"])
    return Target(name, url=st.session_state["base_url"].strip(), model=st.session_state["model"].strip(), api_key=key)


def key_source(target: Target) -> str:
    """Whose key a run on ``target`` spends: ``typed`` (the visitor's), the operator's variable name, or ""."""
    if BACKENDS[target.backend].needs != API or not target.api_key:
        return ""
    return api_key_for(st.session_state["preset"], st.session_state.get(SESSION_KEY), st.session_state["base_url"])[1]


def connect(target: Target) -> Connection:
    """A connection for one run (close it, or use ``with``). In hosted mode an API's URL must be on the
    allow list and resolve to public addresses, checked again on every connection the client opens.
    Raises with a readable message."""
    transport = None
    if BACKENDS[target.backend].needs == API:
        settings = hosted()
        check_base_url(target.url, settings)
        transport = guarded_transport(settings) if settings.hosted else None
    return open_connection(target, transport)
