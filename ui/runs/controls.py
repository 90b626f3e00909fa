"""Run, Stop and the recorded results: a page's plan becomes a background run (`start_run`)."""

from __future__ import annotations

from datetime import datetime

import streamlit as st

from core.experiments import EXPERIMENTS
from core.hosting import Refused
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
    """Check the budgets, open a connection and start a run in the background; show why not otherwise."""
    t = texts()
    if plan.plan.requests == 0:
        st.warning(t("common.nothing_to_run"))
        return None
    try:
        hosted().check_run(plan.plan.requests, plan.plan.tokens)
    except Refused as exc:
        st.error(t.refusal(exc), icon=":material/block:")
        return None
    try:
        target = current_target(plan.slots)
        conn = connect(target)
    except Exception as exc:  # noqa: BLE001 - any failure to connect is shown, never raised into Streamlit
        st.error(f"{t('common.backend_error')} {t.refusal(exc) if isinstance(exc, Refused) else exc}")
        return None
    try:
        source = plan.make_source(conn)
    except ValueError as exc:  # a document or settings that cannot run (DocumentError, Refused)
        conn.close()
        st.error(t.refusal(exc) if isinstance(exc, Refused) else str(exc))
        return None

    label = t("common.run_label", backend=conn.name, model=conn.info.get("model") or conn.backend.model,
              time=datetime.now().strftime("%H:%M:%S"))
    settings, visitor, whose_key = hosted(), visitor_id(), key_source(target)
    budgets = ledger()
    spend = None
    run_settings = {**conn.describe(), **plan.settings}
    run_id, rows = start_saving(plan.experiment, run_settings, label,  # saved round by round, as the worker gets them
                                metered(source, target.url or "", run_settings),  # + "cpu": the server's share
                                target.api_key)

    def finished() -> None:
        try:  # close the connection, charge what the run sent, one line in the operator's log
            finish_run(run, conn, plan.plan, budgets, spend, whose_key)
        finally:  # a failing close must not leave the saved run "running" while this process lives
            finish_saving(run)

    try:
        if settings.hosted and whose_key != "typed":  # every run not on the visitor's own key: the demo's budgets
            spend = budgets.reserve(visitor, plan.plan.tokens, settings)
        run = BackgroundRun(plan.experiment, run_settings, rows, connection=conn, lock_key=target.lock_key(),
                            planned_rounds=plan.plan.steps, label=label, run_id=run_id, on_finish=finished,
                            on_stop=conn.abort, page_alive=page_alive_probe(), grace_s=settings.abandon_grace_s,
                            visitor=visitor, busy_slots=conn.busy_slots, line=line())
        run.start(settings.max_concurrent_runs, settings.max_runs_per_visitor, settings.max_waiting_runs)
    except Refused as exc:
        if spend is not None:
            budgets.settle(spend, 0)
        conn.close()
        forget(run_id)
        st.error(t.refusal(exc), icon=":material/block:")
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

