"""Run, Stop and the recorded results: a page's plan becomes a background run (`start_run`)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import httpx
import streamlit as st

from core.backends.connect import Connection, Target
from core.engine.server import EngineError
from core.experiments import EXPERIMENTS, Experiment
from core.experiments.base import Source
from core.hosting import Refused
from core.runs.admission import Admission, admit
from core.runs.recording import metered
from core.runs.runner import BackgroundRun
from ui.runs.contract import ExperimentPlan
from ui.runs.saved import (
    finish_saving,
    forget,
    latest_saved,
    start_saving,
)
from ui.runs.visitor import finish_run, ledger, line, page_alive_probe, visitor_id
from ui.session import hosted
from ui.sidebar.target import connect, current_target, key_source
from ui.text import texts


def history(experiment: str) -> list[BackgroundRun]:
    return st.session_state.setdefault("history", {}).setdefault(experiment, [])


def start_run(plan: ExperimentPlan) -> BackgroundRun | None:
    """Admit the run (`core.runs.admission.admit`: the hosted demo's limits, URL guard and budgets), open a
    connection and start it in the background; show why not otherwise."""
    t = texts()
    if plan.plan.requests == 0:
        st.warning(t("common.nothing_to_run"))
        return None
    try:
        target = current_target(plan.slots)
        visitor, whose_key = visitor_id(), key_source(target)
        admission = admit(plan.plan, target, visitor, whose_key, hosted(), ledger())
        conn = connect(target)
    except Refused as exc:
        st.error(t.refusal(exc), icon=":material/block:")
        return None
    except Exception as exc:  # noqa: BLE001 - any failure to connect is shown, never raised into Streamlit
        st.error(f"{t('common.backend_error')} {exc}")
        return None
    try:
        source = plan.make_source(conn)
    except ValueError as exc:  # a document or settings that cannot run (DocumentError, Refused)
        _refused(admission, conn, t.refusal(exc) if isinstance(exc, Refused) else str(exc))
        return None
    return _start(plan, conn, source, target, admission, visitor, whose_key)


def _refused(admission: Admission, conn: Connection, sentence: str, icon: str | None = None) -> None:
    admission.settle([])  # nothing was sent: the reservation goes back
    conn.close()
    st.error(sentence, icon=icon)


def _start(plan: ExperimentPlan, conn: Connection, source: Source, target: Target, admission: Admission,
           visitor: str, whose_key: str) -> BackgroundRun | None:
    t, settings = texts(), hosted()
    label = t("common.run_label", backend=conn.name, model=conn.info.get("model") or conn.backend.model,
              time=datetime.now().strftime("%H:%M:%S"))
    run_settings = {**conn.describe(), **plan.settings}
    run_id, rows = start_saving(plan.experiment, run_settings, label,  # saved round by round, as the worker gets them
                                metered(source, target.url or "", run_settings),  # + "cpu": the server's share
                                target.api_key)

    def finished() -> None:
        try:  # close the connection, charge what the run sent, one line in the operator's log
            finish_run(run, conn, admission, whose_key)
        finally:  # a failing close must not leave the saved run "running" while this process lives
            finish_saving(run)

    try:
        run = BackgroundRun(plan.experiment, run_settings, rows, connection=conn, lock_key=target.lock_key(),
                            planned_rounds=plan.plan.steps, label=label, run_id=run_id, on_finish=finished,
                            on_stop=conn.abort, page_alive=page_alive_probe(), grace_s=settings.abandon_grace_s,
                            visitor=visitor, busy_slots=conn.busy_slots, line=line())
        run.start(settings.max_concurrent_runs, settings.max_runs_per_visitor, settings.max_waiting_runs)
    except Refused as exc:
        forget(run_id)
        _refused(admission, conn, t.refusal(exc), ":material/block:")
        return None
    history(plan.experiment).append(run)
    return run


def load_recorded(experiment: str) -> None:
    """Add the shipped recorded run of this experiment to the history (labelled as recorded)."""
    t = texts()
    settings, rows = EXPERIMENTS[experiment].recorded()
    label = f"{t('common.recorded')} · {settings.get('model', '')}"
    if rows and all(run.label != label for run in history(experiment)):
        history(experiment).append(BackgroundRun.recorded(experiment, {**settings, "recorded": True}, rows, label))


def run_controls(plan: ExperimentPlan, recorded: bool = True) -> BackgroundRun | None:
    """Run, Stop and 'Show recorded results'; returns the run to show (the newest of this experiment)."""
    t = texts()
    experiment = plan.experiment
    runs = history(experiment)
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
        current = history(experiment)[-1]
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
        return f"{type(exc).__name__}: {exc}"
    return cache[cached]
