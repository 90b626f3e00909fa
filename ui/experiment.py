"""What every experiment page shares: Run and Stop, the live loop, history, table and downloads.

A run's requests go out from a worker thread (`core.experiments.runner.BackgroundRun`); this script thread
only polls it and redraws. While the page watches, the worker waits for each redraw to finish
before its next request, so drawing never overlaps a timed request (see BENCHMARKS.md). Each
redraw is an ``st.*`` call, so a click on Stop (a rerun) lands within half a second; the rounds
already measured live in the run object in session state and survive the rerun, a page switch,
or a reconnect.

A redraw never costs more than the rounds it draws: when a round ends sooner after the last redraw than that
redraw took (short rounds, a slow machine), its chart waits and the next redraw shows it with the rounds after it
(`redraw_due`); a change of state and the run's end are always drawn at once. Rounds are drawn only as one ends,
while the worker waits, never during a timed request.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from datetime import datetime

import pandas as pd
import streamlit as st

from core.experiments.base import RunContext
from core.experiments.registry import EXPERIMENTS, records_key
from core.experiments.runner import FAILED, QUEUED, RUNNING, STOPPED, WAITING, BackgroundRun, Snapshot
from core.export import to_csv, to_json
from core.hosting import Refused
from core.records import RoundResult
from core.roofline.busy import metered
from ui.connection import connect, current_target, key_source
from ui.content import Texts
from ui.contract import DrawRuns, ExperimentPlan, Records, RunView
from ui.roofline import busy_note
from ui.secrets import hosted
from ui.store import (
    finish_saving,
    forget,
    latest_saved,
    report_maker,
    saved_compare,
    saved_list,
    start_saving,
    store_notice,
)
from ui.texts import texts
from ui.visitor import finish_run, ledger, line, page_alive_probe, visitor_id

TABLE_COLUMNS = ["round", "strategy", "target_tokens", "prompt_tokens", "recomputed_tokens", "cached_tokens",
                 "cache_write_tokens", "prefill_ms", "first_reasoning_ms", "ttft_ms", "output_tokens", "decode_ms",
                 "total_ms", "ms_per_output_token", "prefill_source", "decode_source", "usage_source", "error"]
EXPLAINED_COLUMNS = ["prefill_ms", "ttft_ms", "decode_ms", "ms_per_output_token", "cached_tokens", "prefill_source",
                     "decode_source", "usage_source"]  # where each number comes from: a tooltip on the header


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
                                metered(lambda cancel, progress: source(RunContext(conn, cancel, progress)),
                                        target.url or "", run_settings),  # + "cpu": the server's share, at the end
                                target.api_key)

    def finished() -> None:
        try:  # close the connection, charge what the run sent, one line in the operator's log
            finish_run(run, conn, plan.plan, budgets, spend, whose_key)
        finally:  # a failing close must not leave the saved run "running" while this process lives
            finish_saving(run)

    try:
        if settings.hosted and whose_key != "typed":  # every run not on the visitor's own key: the demo's budgets
            spend = budgets.reserve(visitor, plan.plan.tokens, settings)
        run = BackgroundRun(plan.experiment, run_settings, rows, lock_key=target.lock_key(),
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


def _active(run: BackgroundRun, snap: Snapshot) -> bool:
    """Judged on the snapshot, so the last redraw always shows the final rows."""
    return snap.status in (QUEUED, WAITING, RUNNING) and not run.cancel.is_set()


def _status(t: Texts, run: BackgroundRun, snap: Snapshot, records: Records) -> None:
    """Exactly one element in every state, so nothing stale is left behind when the state changes."""
    done = len(snap.rows)
    if snap.status == QUEUED and not run.cancel.is_set():
        wait = snap.expected_wait_s
        text = t("common.queued", position=snap.queue_position or 1)
        text += " " + (t("common.queued_wait", seconds=round(wait)) if wait is not None else t("common.queued_unknown"))
        st.info(text, icon=":material/hourglass_top:")
    elif snap.status == WAITING and not run.cancel.is_set():
        st.info(t("common.waiting"), icon=":material/hourglass_top:")
    elif _active(run, snap):
        total = max(run.planned_rounds, done + 1)
        text = t(records.step, i=min(done + 1, total), n=total)
        if snap.progress and snap.progress.get("total"):
            p = snap.progress
            text += " · " + t(
                "common.prefill_progress", processed=p.get("processed", 0), total=p["total"], cache=p.get("cache", 0)
            )
        st.progress(min(done / total, 1.0), text=text)
    elif run.ended_because == "page closed":
        st.warning(t("common.page_closed", n=done), icon=":material/stop_circle:")
    elif snap.status == STOPPED or run.cancel.is_set():
        st.warning(t(records.stopped, n=done), icon=":material/stop_circle:")
    elif snap.status == FAILED:
        failed = [r for r in snap.rows if r.error]
        detail = f"{records.name(failed[-1])}: {failed[-1].error}" if failed else snap.error
        st.error(f"{t(records.failed)} {detail}", icon=":material/error:")
    else:
        st.success(t(records.done, n=done), icon=":material/check_circle:")


def rounds_table(rows: Sequence[RoundResult]) -> pd.DataFrame:
    frame = pd.DataFrame.from_records([r.to_dict() for r in rows])
    if frame.empty:
        return frame
    return frame[[c for c in TABLE_COLUMNS if c in frame and frame[c].notna().any() or c == "error"]]


def round_name(row: RoundResult) -> str:
    return f"round {row.round}{' · ' + row.strategy if row.strategy else ''}"


ROUNDS = Records(table=rounds_table, name=round_name)


# A style only, so Streamlit adds it to the page without a box; it goes with the run's last rerun.
QUIET_RUNNING_WIDGET = "<style>[data-testid='stStatusWidget'] { display: none; }</style>"


def redraw_due(since_last_s: float, last_cost_s: float) -> bool:
    """Draw a new round now, or leave it for a later round: the time since the last redraw must pay for its cost."""
    return since_last_s >= last_cost_s


def show_run(run: BackgroundRun | None, draw: DrawRuns, experiment: str, records: Records = ROUNDS) -> None:
    """Draw the run and keep redrawing after every round until it ends or is stopped."""
    t = texts()
    store_notice(t)
    session_only = [r for r in history(experiment) if r is not run and r.rows and r.settings.get("recorded")]
    compare_ids, compare = saved_compare(t, experiment, run.run_id if run else None, session_only)
    if run is None:
        st.info(t("common.no_rounds"))
        saved_list(t, experiment)
        return
    if run.active:  # the page shows its own progress and Stop; Streamlit's animated one would cost the browser
        st.html(QUIET_RUNNING_WIDGET)  # half its CPU for the whole run (BENCHMARKS.md, "The app's CPU share")
    status_box, body, heartbeat = st.empty(), st.empty(), st.empty()
    shown_rows, shown_status, shown_line = -1, "", None
    seen_rows, drawn_at, draw_cost = -1, 0.0, 0.0  # the rounds seen, when the last redraw ended, what it took (s)
    was_active = run.active
    run.watched = True
    try:
        while True:
            snap = run.snapshot()
            line = (snap.status, len(snap.rows), snap.progress, snap.warning, snap.queue_position,
                    snap.expected_wait_s, run.cancel.is_set())
            if line != shown_line:  # the browser re-renders what it is sent: send the status only when it changed
                shown_line = line
                with status_box.container():
                    _status(t, run, snap, records)
                    if snap.warning:
                        st.warning(snap.warning, icon=":material/warning:")
            else:
                heartbeat.empty()  # an element costing the browser nothing, so a click on Stop is still heard
            new_round, seen_rows = len(snap.rows) != seen_rows, len(snap.rows)  # the worker waits for it now
            new_state = snap.status != shown_status or not _active(run, snap)
            if (len(snap.rows), snap.status) != (shown_rows, shown_status) and (
                new_state or new_round and redraw_due(time.perf_counter() - drawn_at, draw_cost)
            ):
                shown_rows, shown_status = len(snap.rows), snap.status
                started = time.perf_counter()
                with body.container():  # draw functions keep one layout in every state: nothing goes stale
                    draw([RunView(run.label, snap.rows), *compare], t, f"{run.run_id}-{snap.version}")
                    busy_note(t, run.settings.get("cpu"))
                    st.subheader(t("common.table"))
                    st.dataframe(
                        records.table(snap.rows),
                        hide_index=True,
                        key=f"table-{run.run_id}-{snap.version}",
                        column_config={c: st.column_config.Column(help=t(f"table.{c}")) for c in EXPLAINED_COLUMNS},
                    )
                drawn_at = time.perf_counter()
                draw_cost = drawn_at - started
                run.drawn()
            elif new_round:
                run.drawn()  # left for a later redraw: the next request need not wait
            if not _active(run, snap):
                break
            run.wait_for_change(snap.version, 0.5)
            time.sleep(0.05)  # let a burst of progress updates coalesce into one redraw
    finally:  # a rerun or a page switch ends this loop; the run then goes on without waiting for redraws
        run.watched = False
        run.drawn()
    if was_active:
        st.rerun()  # the run has ended: draw Run, Stop and the downloads for the finished run
    _downloads(t, run, snap, records, compare_ids)
    saved_list(t, experiment)


def _downloads(t: Texts, run: BackgroundRun, snap: Snapshot, records: Records, compare_ids: Sequence[str]) -> None:
    for row in snap.rows:
        if row.error:
            st.error(f"{records.name(row)}: {row.error}")
    if snap.error:
        st.error(snap.error)
    if not snap.rows:
        return
    left, right, report, _ = st.columns([1, 1, 1.4, 1.6])
    name = f"prefill-lab-{run.experiment}-{run.run_id}"
    left.download_button(
        t("common.download_csv"),
        to_csv(run.settings, snap.rows),
        f"{name}.csv",
        "text/csv",
        on_click="ignore",
        key=f"csv-{run.run_id}",
        icon=":material/download:",
    )
    right.download_button(
        t("common.download_json"),
        to_json(run.settings, {records_key(run.experiment): snap.rows}),
        f"{name}.json",
        "application/json",
        on_click="ignore",
        key=f"json-{run.run_id}",
        icon=":material/download:",
    )
    saved_ids = [i for i in [run.run_id, *compare_ids] if not run.settings.get("recorded") or i != run.run_id]
    if saved_ids:
        report.download_button(
            t("runs.download_report"),
            report_maker(t, saved_ids),  # built when clicked: the page does not carry 1 MB on every redraw
            f"{name}.html",
            "text/html",
            on_click="ignore",
            key=f"html-{run.run_id}",
            icon=":material/description:",
        )


def explain(t: Texts, section: str, shown: bool | None, verdict_text: str) -> None:
    """'What you should see' beside 'what this run showed'."""
    left, right = st.columns(2)
    with left:
        st.markdown(f"**{t('common.what_to_see')}**  \n" + t.rich(f"{section}.expect"), unsafe_allow_html=True)
    with right:
        st.markdown(f"**{t('common.verdict')}**")
        (st.success if shown else st.info)(verdict_text)
