"""Run, Stop and the recorded results: a page's plan becomes a background run through one call
(`core.runs.session.start_run`: admission, saving, metering, the conclusion and settlement)."""

from __future__ import annotations

from datetime import datetime
from typing import Any, TypeVar

import httpx
import streamlit as st

from core.backends.connect import Connection, Target
from core.documents import DocumentError, read_document
from core.engine.server import EngineError
from core.experiments import EXPERIMENTS, Experiment
from core.hosting import Refused
from core.runs import BackgroundRun, NotStarted, Visit
from core.runs import start_run as start_session
from core.runs.session import CONNECT, NOTHING
from core.words import Sentence, in_words, said
from ui.runs.contract import ExperimentPlan
from ui.runs.saved import latest_saved, owner, run_store
from ui.runs.visitor import ledger, line, page_alive_probe, visitor_id
from ui.session import hosted
from ui.sidebar import connect, current_target, key_source
from ui.text import Texts, texts

D = TypeVar("D", str, None)  # an uploaded document's stand-in: the page's default text, or none


def session_runs(experiment: str) -> list[BackgroundRun]:
    """This session's runs of ``experiment``, oldest first (the page shows the newest)."""
    return st.session_state.setdefault("history", {}).setdefault(experiment, [])


def _visit(target: Target) -> Visit:
    return Visit(hosted(), ledger(), line(), visitor_id(), key_source(target), owner(), page_alive_probe())


def _say(t: Texts, refused: NotStarted) -> None:
    """Why a run did not start, in the page's words."""
    if refused.reason == NOTHING:
        st.warning(t("common.nothing_to_run"))
    elif isinstance(refused.cause, Refused):
        st.error(t.refusal(refused.cause), icon=":material/block:")
    elif refused.reason == CONNECT:
        st.error(f"{t('common.backend_error')} {in_words(said(refused.cause), t) if refused.cause else refused}")
    else:  # a document or settings that cannot run on this backend
        st.error(in_words(said(refused.cause), t) if refused.cause is not None else str(refused))


def start_run(plan: ExperimentPlan) -> BackgroundRun | None:
    """Start the page's run in the background (`core.runs.session.start_run`) and keep it in the session's
    history; show why not otherwise."""
    t = texts()

    def label(conn: Connection) -> str:
        return t("common.run_label", backend=conn.name, model=conn.info.get("model") or conn.backend.model,
                 time=datetime.now().strftime("%H:%M:%S"))

    try:
        target = current_target(plan.slots)  # the sidebar's backend (the embedded server started with its slots)
        run = start_session(plan, target, label=label, store=run_store(), visit=_visit(target))
    except NotStarted as exc:
        _say(t, exc)
        return None
    except Exception as exc:  # noqa: BLE001 - a backend that cannot be reached is shown, never raised into Streamlit
        st.error(f"{t('common.backend_error')} {in_words(said(exc), t)}")
        return None
    session_runs(plan.experiment).append(run)
    return run


def load_recorded(experiment: str) -> None:
    """Add the shipped recorded run of this experiment to the history (labelled as recorded)."""
    t = texts()
    settings, rows = EXPERIMENTS[experiment].recorded()
    label = f"{t('common.recorded')} · {settings.get('model', '')}"
    if rows and all(run.label != label for run in session_runs(experiment)):
        session_runs(experiment).append(BackgroundRun.recorded(experiment, {**settings, "recorded": True}, rows, label))


def run_controls(plan: ExperimentPlan, recorded: bool = True) -> BackgroundRun | None:
    """Run, Stop and 'Show recorded results'; returns the run to show (the newest of this experiment)."""
    t = texts()
    experiment = plan.experiment
    runs = session_runs(experiment)
    current = runs[-1] if runs else latest_saved(experiment)  # after a reload or a restart: the newest saved run
    left, middle, right, _ = st.columns([1, 1, 2, 2])
    busy = current is not None and current.active
    if left.button(
        t("common.run"), type="primary", disabled=busy, key=f"run_{experiment}", icon=":material/play_arrow:"
    ):
        if start_run(plan) is not None:
            st.rerun()  # draw the buttons again: Run disabled, Stop enabled
    if middle.button(t("common.stop"), disabled=not busy, key=f"stop_{experiment}", icon=":material/stop:") and current:
        current.stop()
        st.rerun()  # draw the buttons again: Run enabled, Stop disabled
    if recorded and right.button(
        t("common.show_recorded"), disabled=busy, key=f"recorded_{experiment}", icon=":material/history:"
    ):
        load_recorded(experiment)
        current = session_runs(experiment)[-1]
    return current


def preview(spec: Experiment, settings: Any, key: str) -> Any:
    """``spec.prepare(settings, conn)`` on the current backend before a run, so a page can show what will be sent
    (experiment 3's document cut to the context); kept in the session per ``key`` (what the settings hold) and
    target. A string says why it cannot be prepared."""
    cache = st.session_state.setdefault("previews", {})
    try:
        target = current_target(spec.slots(settings))
        cached = (spec.id, key, target.backend, target.url)
        if cached not in cache:
            with connect(target) as conn:
                cache[cached] = spec.prepare(settings, conn)
    except (EngineError, httpx.HTTPError, ValueError, KeyError) as exc:
        message = said(exc)  # a library's own words are quoted in the page's language
        return in_words(message if isinstance(message, Sentence) else
                        Sentence("backend_error.library", kind=type(exc).__name__, error=message), texts())
    return cache[cached]


def uploaded(t: Texts, section: str, upload: Any, default: D, default_name: str) -> tuple[str | D, str]:
    """An uploaded document's text and name, or ``default`` where none was given or it cannot be read (said in
    the page's ``section`` words: ``doc_uploaded``, ``doc_error``, ``doc_default``)."""
    if upload is None:
        st.caption(t(f"{section}.doc_default"))
        return default, default_name
    try:
        text = read_document(upload.getvalue(), upload.name, hosted().max_doc_bytes)
    except DocumentError as exc:
        st.error(t(f"{section}.doc_error", error=in_words(said(exc), t)), icon=":material/warning:")
        return default, default_name
    st.caption(t(f"{section}.doc_uploaded", name=upload.name))
    return text, upload.name
