"""The shared sidebar: language, backend choice and its status, and opening a connection.

The embedded llama-server is one process for the whole Streamlit server (``st.cache_resource``),
stopped when the cache entry is released (Restart) and at exit. A visitor's API key lives only in
their session state; an operator's key is read from ``st.secrets`` or the environment and is
never put into a widget, so it never reaches the browser.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import httpx
import streamlit as st

from core import experiments as ex
from core.backends import PRESETS
from core.connect import Connection, Target, open_connection as connect
from core.content import LANGUAGES, Texts, load
from core.engine import EngineError, LocalServer, find_model, find_server_binary
from core.experiments import cache_doc_budget
from core.hosting import HostedSettings, check_base_url, guarded_transport, load_settings
from core.prompts import FittedDocument, fit_document

EMBEDDED, LLAMA_URL, API = "embedded", "llama_url", "api"
KINDS = (EMBEDDED, LLAMA_URL, API)
DEFAULT_PRESET = "AI Builder Space"
# widget keys kept across pages and across backend switches
PERSISTENT = {"lang": "en", "backend_kind": EMBEDDED, "llama_url": "http://127.0.0.1:8080", "preset": DEFAULT_PRESET,
              "base_url": PRESETS[DEFAULT_PRESET].base_url, "model": PRESETS[DEFAULT_PRESET].model}
# the experiment pages' settings: given their defaults here, not in the widgets, so they also survive page switches
PERSISTENT.update({"input_sizes": list(ex.DEFAULT_INPUT_SIZES), "input_repeats": 1,
                   "output_lengths": list(ex.DEFAULT_OUTPUT_LENGTHS), "output_repeats": 1,
                   "cache_rounds": ex.DEFAULT_ROUNDS, "cache_doc_tokens": ex.DEFAULT_CACHE_DOC_TOKENS,
                   "cache_strategies": list(ex.DEFAULT_STRATEGIES)})
SESSION_KEY = "session_api_key"  # the visitor's key: plain session state, never a widget value sent back


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


def texts() -> Texts:
    return Texts(st.session_state.get("lang", "en"))


_started: list[bool] = []  # set once the cached server exists; module state shared by all sessions


def _release(server: LocalServer) -> None:
    server.stop()
    _started.clear()


@st.cache_resource(show_spinner=False, on_release=_release)
def embedded_server() -> LocalServer:
    """The one embedded llama-server of this Streamlit process."""
    server = LocalServer().start()
    _started.append(True)
    return server


@st.cache_data(ttl=10, show_spinner=False)
def llama_status(url: str) -> dict[str, str]:
    """What a llama-server says about itself, or the error (cached for 10 s)."""
    try:
        with connect(Target("llama", url=url)) as conn:
            return {k: str(v) for k, v in conn.info.items()}
    except httpx.ConnectError as exc:
        return {"error": str(exc)}
    except (httpx.HTTPError, KeyError, ValueError) as exc:
        return {"error": f"{type(exc).__name__}: {exc}"}


@dataclass
class BackendChoice:
    kind: str
    url: str = ""
    model: str = ""
    api_key: str | None = None

    def lock_key(self) -> str:
        return self.url


def _keep_widget_state(settings: HostedSettings) -> None:
    for key, default in PERSISTENT.items():
        st.session_state[key] = st.session_state.get(key, default)
    if settings.hosted:
        st.session_state["backend_kind"] = API
        if st.session_state["base_url"] not in settings.allowed_base_urls and settings.allowed_base_urls:
            st.session_state["base_url"] = settings.allowed_base_urls[0]


def _apply_preset() -> None:
    preset = PRESETS[st.session_state["preset"]]
    st.session_state["base_url"] = preset.base_url
    st.session_state["model"] = preset.model


def _store_key() -> None:
    """Move a typed key out of the widget, so the field is empty again and the key is never echoed."""
    st.session_state[SESSION_KEY] = st.session_state["api_key_input"].strip()
    st.session_state["api_key_input"] = ""


def _forget_key() -> None:
    st.session_state.pop(SESSION_KEY, None)


def api_key_for(preset_name: str, typed: str | None) -> tuple[str | None, str]:
    """The visitor's key, else the operator's for this preset; and where it came from."""
    if typed:
        return typed, "typed"
    env_name = PRESETS[preset_name].key_env if preset_name in PRESETS else None
    key = secret(env_name)
    return key, (env_name or "") if key else ""


def render_sidebar() -> None:
    settings = hosted()
    _keep_widget_state(settings)
    t = texts()
    with st.sidebar:
        st.radio(t("sidebar.language"), LANGUAGES, key="lang", horizontal=True,
                 format_func=lambda code: load(code)["language_name"])
        t = texts()
        st.subheader(t("sidebar.title"))
        kinds = (API,) if settings.hosted else KINDS
        kind = st.radio(t("sidebar.backend"), kinds, key="backend_kind", format_func=lambda k: t(f"sidebar.{k}"))
        if settings.hosted:
            st.caption(t("sidebar.hosted"))
        if kind == EMBEDDED:
            _embedded_status(t)
        elif kind == LLAMA_URL:
            st.text_input(t("sidebar.url"), key="llama_url")
            _llama_status(t, st.session_state["llama_url"])
        else:
            _api_inputs(t, settings)


def _show_props(t: Texts, info: dict[str, str]) -> None:
    st.success(t("sidebar.healthy"), icon=":material/check_circle:")
    st.caption(f"{t('sidebar.status_model')}: `{info.get('model', '?')}`  \n"
               f"{t('sidebar.status_ctx')}: {info.get('n_ctx', '?')}  \n{t('sidebar.status_build')}: {info.get('server_build', '?')}")


def _start_embedded(t: Texts) -> LocalServer:
    """The embedded server; its first start is shown step by step in an ``st.status`` box."""
    if _started:
        return embedded_server()
    with st.status(t("sidebar.starting"), expanded=True) as status:
        st.write(f"{t('sidebar.binary')}: `{find_server_binary().name}`")
        st.write(f"{t('sidebar.status_model')}: `{find_model().name}`")
        server = embedded_server()
        st.write(f"{t('sidebar.listening')} {server.url}")
        status.update(label=t("sidebar.started"), state="complete", expanded=False)
    return server


def _embedded_status(t: Texts) -> None:
    try:
        server = _start_embedded(t)
    except EngineError as exc:
        st.error(str(exc).split("\n", 1)[0])
        st.code(str(exc), language=None)
        if st.button(t("sidebar.retry"), key="retry_engine"):
            embedded_server.clear()
            st.rerun()
        return
    crashed = server.crashed()
    if crashed:
        st.error(t("sidebar.not_running"))
        st.code(crashed, language=None)
        if st.button(t("sidebar.restart"), key="restart_engine", type="primary"):
            embedded_server.clear()
            llama_status.clear()
            st.rerun()
        return
    info = llama_status(server.url)
    if "error" in info:
        st.error(info["error"])
    else:
        _show_props(t, info)


def _llama_status(t: Texts, url: str) -> None:
    info = llama_status(url)
    if "error" in info:
        st.error(f"{t('sidebar.not_running')}: {info['error']}")
        if st.button(t("sidebar.check"), key="check_llama"):
            llama_status.clear()
            st.rerun()
    else:
        _show_props(t, info)


def _api_inputs(t: Texts, settings: HostedSettings) -> None:
    st.selectbox(t("sidebar.preset"), list(PRESETS), key="preset", on_change=_apply_preset)
    if settings.hosted:
        st.selectbox(t("sidebar.base_url"), settings.allowed_base_urls, key="base_url")
    else:
        st.text_input(t("sidebar.base_url"), key="base_url")
    st.text_input(t("sidebar.model"), key="model")
    st.text_input(t("sidebar.key"), key="api_key_input", type="password", help=t("sidebar.key_help"), on_change=_store_key)
    _, source = api_key_for(st.session_state["preset"], st.session_state.get(SESSION_KEY))
    if source == "typed":
        st.caption(t("sidebar.key_set"))
        st.button(t("sidebar.forget_key"), key="forget_key", on_click=_forget_key)
    elif source:
        st.caption(t("sidebar.key_from_secrets", name=source))
    st.caption(t("sidebar.cache_report", how=PRESETS[st.session_state["preset"]].cache_report))
    st.caption(t("sidebar.api_note"))


def current_choice() -> BackendChoice:
    """The backend the sidebar points at (starting the embedded server if needed)."""
    kind = API if hosted().hosted else st.session_state.get("backend_kind", EMBEDDED)
    if kind == EMBEDDED:
        return BackendChoice(EMBEDDED, url=embedded_server().url)
    if kind == LLAMA_URL:
        return BackendChoice(LLAMA_URL, url=st.session_state["llama_url"].strip())
    key, _ = api_key_for(st.session_state["preset"], st.session_state.get(SESSION_KEY))
    return BackendChoice(API, url=st.session_state["base_url"].strip(), model=st.session_state["model"].strip(), api_key=key)


def open_connection(choice: BackendChoice) -> Connection:
    """A fresh connection for one run; the caller closes it. Raises with a readable message."""
    if choice.kind == API:
        if not choice.url or not choice.model:
            raise ValueError("Set a base URL and a model in the sidebar.")
        settings = hosted()
        check_base_url(choice.url, settings)
        transport = guarded_transport(settings) if settings.hosted else None
        return connect(Target("api", choice.url, choice.model, choice.api_key), transport)
    return connect(Target("llama", url=choice.url))


def fit_for_backend(document: str, doc_id: str, budget: int, rounds: int) -> FittedDocument | str:
    """The document cut to ``budget`` tokens of the current backend, leaving room in its context for
    ``rounds`` rounds (cached per session), or why it cannot be."""
    cache = st.session_state.setdefault("fitted_documents", {})
    try:
        choice = current_choice()
        key = (doc_id, budget, rounds, choice.kind, choice.url)
        if key not in cache:
            conn = open_connection(choice)
            try:
                cache[key] = fit_document(document, cache_doc_budget(budget, conn.context, rounds), conn.counter)
            finally:
                conn.backend.close()
    except (EngineError, httpx.HTTPError, ValueError, KeyError) as exc:
        return f"{type(exc).__name__}: {exc}"
    return cache[key]
