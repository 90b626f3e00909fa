"""The embedded llama-server: one process per setting for the whole Streamlit server.

``st.cache_resource`` keeps one `LocalServer` per number of slots (experiments 1–3 use one slot:
one KV cache, exact reuse; a batching experiment may ask for more), shared by every session,
stopped when the entry is released (Restart) and at exit.
"""

from __future__ import annotations

import httpx
import streamlit as st

from core.backends.connect import Target, open_connection
from core.engine.server import LocalServer, find_model, find_server_binary
from core.words import Sentence, said
from ui.text import Texts

_started: set[int] = set()  # slots of the servers that exist; module state shared by all sessions


def _release(server: LocalServer) -> None:
    server.stop()
    _started.clear()


@st.cache_resource(show_spinner=False, on_release=_release)
def embedded_server(slots: int = 1) -> LocalServer:
    """The embedded llama-server with ``slots`` parallel sequences, started on first use."""
    server = LocalServer(slots=slots).start()
    _started.add(slots)
    return server


def start_embedded(t: Texts, slots: int = 1) -> LocalServer:
    """The embedded server; its first start is shown step by step in an ``st.status`` box."""
    if slots in _started:
        return embedded_server(slots)
    with st.status(t("sidebar.starting"), expanded=True) as status:
        st.write(f"{t('sidebar.binary')}: `{find_server_binary().name}`")
        st.write(f"{t('sidebar.status_model')}: `{find_model().name}`")
        server = embedded_server(slots)
        st.write(f"{t('sidebar.listening')} {server.url}")
        status.update(label=t("sidebar.started"), state="complete", expanded=False)
    return server


@st.cache_data(ttl=10, show_spinner=False)
def llama_status(url: str) -> dict[str, str]:
    """What a llama-server says about itself, or the error (cached for 10 s)."""
    try:
        with open_connection(Target("llama", url=url)) as conn:
            return {k: str(v) for k, v in conn.info.items()}
    except httpx.ConnectError as exc:
        return {"error": said(exc)}
    except (httpx.HTTPError, KeyError, ValueError) as exc:  # the library's words, quoted in a page's language
        return {"error": Sentence("backend_error.library", kind=type(exc).__name__, error=str(exc))}
