"""Who is on the page, whether the page is still there, and what a visitor's run may spend.

A visitor is one browser: the hash of Streamlit's XSRF cookie, which a reload keeps (a tab's session
id does not), else the connection's address, else the session. Its runs are counted against the
per-visitor limits; the operator's key is budgeted per visitor and per hour. The budgets and the line of runs
live in the run store (`core.store.ledger`, `core.store.leases`), shared by every process and replica and kept
across restarts, unless the operator keeps runs in memory (``PREFILL_LAB_DB = ":memory:"``): then in this process.

Whether a page is still connected is asked of Streamlit's runtime (`is_active_session`, safe from
any thread), never through ``st.*``: a run's watcher thread polls it and stops a run whose page
has been gone longer than the grace period. The same check frees the uploads of a session that can
no longer come back (Streamlit keeps a closed session's files until the process ends).
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Callable, Sequence

import streamlit as st
from streamlit.runtime import Runtime
from streamlit.runtime.scriptrunner import get_script_run_ctx
from streamlit.runtime.uploaded_file_manager import UploadedFile

from core.hosting import Ledger, TokenLedger
from core.runs.runner import QUEUE, Line
from core.store import ENV, MEMORY, default_location
from core.store.leases import LeaseLine
from core.store.ledger import StoreLedger
from ui.runs.saved import run_store
from ui.session import hosted, secret

RECONNECT_S = 150.0  # Streamlit keeps a closed session for a reconnect for 2 minutes; then it cannot return
SWEEP_S = 15.0
LIMITS_KEY = "limits_visitor"  # the browser, for limits and budgets (the run store names visitors by their link)


def session_id() -> str:
    ctx = get_script_run_ctx()
    return ctx.session_id if ctx is not None else ""


def _browser_token() -> str:
    """The XSRF cookie's token: Streamlit masks it afresh on every response, the token under the mask stays."""
    cookie = st.context.cookies.get("_streamlit_xsrf") or ""
    try:
        from streamlit.web.server.starlette.starlette_app_utils import decode_xsrf_token_string
    except ImportError:  # another server module: the cookie as it is (stable within a page load)
        return cookie
    token, _ = decode_xsrf_token_string(cookie)
    return token.hex() if token else cookie


def visitor_id() -> str:
    """A short, stable, unguessable name for this browser (never the cookie itself), kept for the session."""
    if LIMITS_KEY not in st.session_state:
        cookie = _browser_token()
        basis = f"cookie:{cookie}" if cookie else f"ip:{st.context.ip_address}" if st.context.ip_address else ""
        st.session_state[LIMITS_KEY] = hashlib.sha256((basis or f"session:{session_id()}").encode()).hexdigest()[:12]
    return str(st.session_state[LIMITS_KEY])


def page_alive_probe() -> Callable[[], bool]:
    """For a worker thread: is this page's session still connected? (True outside a real server: AppTest.)"""
    sid = session_id()
    if not Runtime.exists() or not sid:
        return lambda: True
    runtime = Runtime.instance()
    return lambda: runtime.is_active_session(sid)


@st.cache_resource(show_spinner=False)
def _budgets_and_line(location: str, lease_s: float) -> tuple[Ledger, Line]:
    store = run_store()
    if location == MEMORY:  # the operator keeps nothing on disk: one process, its own budgets and line
        return TokenLedger(), QUEUE
    if not store.on_disk:  # the store asked for could not be opened: budgets fail closed, the cap holds here
        return StoreLedger(store.db, down=store.problem), QUEUE
    return StoreLedger(store.db), LeaseLine(store.db, lease_s)


def ledger() -> Ledger:
    """The operator's token budgets, shared by every session (and, in a store, every replica)."""
    return _budgets_and_line(secret(ENV) or default_location(), hosted().lease_s)[0]


def line() -> Line:
    """The cap on runs at once and the waiting line, shared by every session (and, in a store, every replica)."""
    return _budgets_and_line(secret(ENV) or default_location(), hosted().lease_s)[1]


class UploadJanitor:
    """Frees the uploaded files of sessions gone for longer than Streamlit keeps them for a reconnect."""

    def __init__(self) -> None:
        self._gone_since: dict[str, float | None] = {}
        self._guard = threading.Lock()
        threading.Thread(target=self._sweep, name="upload-janitor", daemon=True).start()

    def watch(self, sid: str) -> None:
        with self._guard:
            self._gone_since.setdefault(sid, None)

    def _sweep(self) -> None:
        while True:
            time.sleep(SWEEP_S)
            if not Runtime.exists():
                continue
            runtime = Runtime.instance()
            now = time.monotonic()
            with self._guard:
                for sid, since in list(self._gone_since.items()):
                    if runtime.is_active_session(sid):
                        self._gone_since[sid] = None
                    elif since is None:
                        self._gone_since[sid] = now
                    elif now - since >= RECONNECT_S:
                        runtime.uploaded_file_mgr.remove_session_files(sid)
                        del self._gone_since[sid]


@st.cache_resource(show_spinner=False)
def upload_janitor() -> UploadJanitor:
    return UploadJanitor()


def free_uploads_when_gone() -> None:
    """Call on a page with an uploader: this session's files are freed once it is gone for good."""
    sid = session_id()
    if sid and Runtime.exists():
        upload_janitor().watch(sid)


def bounded_uploads(files: Sequence[UploadedFile], most_files: int, most_bytes: int) -> tuple[list[UploadedFile], int]:
    """The first uploads that fit in ``most_files`` and ``most_bytes`` together; the others are dropped from the
    server's memory at once (not kept until the session ends). Also returns how many files came, to say so."""
    kept: list[UploadedFile] = []
    total = 0
    for upload in files:
        if len(kept) < most_files and total + upload.size <= most_bytes:
            kept.append(upload)
            total += upload.size
        elif Runtime.exists():  # the in-memory manager (Streamlit's default) can drop one file
            remove = getattr(Runtime.instance().uploaded_file_mgr, "remove_file", None)
            if remove is not None:
                remove(session_id(), upload.file_id)
    return kept, len(files)
