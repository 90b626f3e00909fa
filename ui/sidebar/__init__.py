"""The shared sidebar: language, the backend (from the one registry) and its status; and, for the pages that
run something, the backend it chose (`current_target`, `key_source`), a connection to it (`connect`) and the
embedded server (`start_embedded`).

A visitor's API key lives only in their session state; an operator's key is read from
``st.secrets`` or the environment and is never put into a widget, so it never reaches the browser.
"""

from __future__ import annotations

import streamlit as st

from core.backends import API, BACKENDS, ENGINE, PRESETS
from core.engine.server import EngineError
from core.hosting import HostedSettings
from core.words import LANGUAGES, in_words, load
from ui.session import (
    BACKEND_KEY,
    SESSION_KEY,
    api_key_for,
    apply_preset,
    forget_key,
    hosted,
    keep_preset_of,
    keep_widget_state,
    offered_backends,
    presets_for,
    store_key,
)
from ui.sidebar.build import offer_native_build
from ui.sidebar.engine import embedded_server, llama_status, start_embedded
from ui.sidebar.models import model_picker
from ui.sidebar.target import connect, current_target, key_source
from ui.text import LANG_KEY, Texts, texts

__all__ = ["connect", "current_target", "key_source", "render_sidebar", "start_embedded"]


def render_sidebar() -> None:
    settings = hosted()
    keep_widget_state(settings)
    with st.sidebar:
        st.radio(texts()("sidebar.language"), LANGUAGES, key=LANG_KEY, horizontal=True,
                 format_func=lambda code: load(code)["language_name"])
        t = texts()
        st.subheader(t("sidebar.title"))
        name = st.radio(t("sidebar.backend"), offered_backends(settings), key=BACKEND_KEY,
                        format_func=lambda n: t(f"sidebar.backend_{n}"))
        if settings.hosted:
            st.caption(t("sidebar.hosted"))
        needs = BACKENDS[name].needs
        if needs == ENGINE:
            _embedded_status(t)
        elif needs == API:
            _api_inputs(t, name, settings)
        else:
            st.text_input(t("sidebar.url"), key="llama_url")
            _llama_status(t, st.session_state["llama_url"])


def _show_props(t: Texts, info: dict[str, str]) -> None:
    st.success(t("sidebar.healthy"), icon=":material/check_circle:")
    st.caption(f"{t('sidebar.status_model')}: `{info.get('model', '?')}`  \n"
               f"{t('sidebar.status_ctx')}: {info.get('n_ctx', '?')}  \n"
               f"{t('sidebar.status_build')}: {info.get('server_build', '?')}")


def _embedded_status(t: Texts) -> None:
    model_picker(t)
    try:
        server = start_embedded(t)
    except EngineError as exc:
        st.error(str(exc).split("\n", 1)[0])
        st.code(str(exc), language=None)
        if st.button(t("sidebar.retry"), key="retry_engine"):
            embedded_server.clear()
            st.rerun()
        if "make engine" in str(exc):  # this CPU needs its own build (or none was found)
            offer_native_build(t)
        return
    crashed = server.crashed()
    if crashed:
        st.error(t("sidebar.not_running"))
        st.code(crashed, language=None)
        if st.button(t("sidebar.restart"), key="restart_engine", type="primary"):
            embedded_server.clear()
            llama_status.clear()
            st.rerun()
        if "make engine" in crashed:
            offer_native_build(t)
        return
    info = llama_status(server.url)
    if "error" in info:
        st.error(in_words(info["error"], t))
    else:
        _show_props(t, info)


def _llama_status(t: Texts, url: str) -> None:
    info = llama_status(url)
    if "error" in info:
        st.error(f"{t('sidebar.not_running')}: {in_words(info['error'], t)}")
        if st.button(t("sidebar.check"), key="check_llama"):
            llama_status.clear()
            st.rerun()
    else:
        _show_props(t, info)


def _api_inputs(t: Texts, name: str, settings: HostedSettings) -> None:
    keep_preset_of(name, settings)
    st.selectbox(t("sidebar.preset"), presets_for(name, settings), key="preset", on_change=apply_preset)
    if settings.hosted:
        st.selectbox(t("sidebar.base_url"), settings.allowed_base_urls, key="base_url")
    else:
        st.text_input(t("sidebar.base_url"), key="base_url")
    st.text_input(t("sidebar.model"), key="model")
    st.text_input(t("sidebar.key"), key="api_key_input", type="password", help=t("sidebar.key_help"),
                  on_change=store_key)
    _, source = api_key_for(st.session_state["preset"], st.session_state.get(SESSION_KEY), st.session_state["base_url"])
    if source == "typed":
        st.caption(t("sidebar.key_set"))
        st.button(t("sidebar.forget_key"), key="forget_key", on_click=forget_key)
    elif source:
        st.caption(t("sidebar.key_from_secrets", name=source))
    st.caption(t("sidebar.cache_report", how=PRESETS[st.session_state["preset"]].cache_report))
    st.caption(t("sidebar.api_note"))
