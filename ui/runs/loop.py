"""What every experiment page shares: Run and Stop, the live loop, history, table and downloads.

A run's requests go out from a worker thread (`core.runs.runner.BackgroundRun`); this script thread
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
from typing import Any

import streamlit as st

from core.charts.base import RunView
from core.conclusions import Conclusion, MachineState, conclusion_of, paragraph
from core.experiments import EXPERIMENTS
from core.runs.runner import FAILED, QUEUED, RUNNING, STOPPED, WAITING, BackgroundRun, Snapshot
from core.words import in_words
from ui.runs.contract import DrawRuns, Records
from ui.runs.controls import session_runs
from ui.runs.downloads import EXPLAINED_COLUMNS, ROUNDS, offer_downloads
from ui.runs.history import view_of
from ui.runs.saved import (
    run_store,
    saved_compare,
    saved_list,
    store_notice,
)
from ui.text import Texts, texts


def busy_note(t: Texts, state: MachineState | None, about: str = "") -> None:
    """Beside what a run showed: the machine was busy during it (others took a large share of the CPU), as its
    meter saw it; kept with the run, so said again after a reload. Nothing for a run not metered (None).
    ``about`` names the run where several notes stand together (the home page's quick run)."""
    if state is not None and state.busy and state.server_share is not None and state.others_s is not None:
        load = f" {t('roofline.busy_load', load=state.load, cores=state.cores)}" if state.load is not None \
            and state.cores else ""
        st.warning((f"**{about}** · " if about else "") + t("roofline.busy", share=100 * state.server_share,
                                                             others=state.others_s) + load, icon=":material/speed:")


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
        detail = f"{records.name(failed[-1])}: {in_words(failed[-1].error, t)}" if failed else snap.error
        st.error(f"{t(records.failed)} {detail}", icon=":material/error:")
    else:
        st.success(t(records.done, n=done), icon=":material/check_circle:")

# A style only, so Streamlit adds it to the page without a box; it goes with the run's last rerun.
QUIET_RUNNING_WIDGET = "<style>[data-testid='stStatusWidget'] { display: none; }</style>"


def redraw_due(since_last_s: float, last_cost_s: float) -> bool:
    """Draw a new round now, or leave it for a later round: the time since the last redraw must pay for its cost."""
    return since_last_s >= last_cost_s


def _draw_rounds(t: Texts, run: BackgroundRun, snap: Snapshot, draw: DrawRuns, records: Records,
                 compare: Sequence[RunView[Any]]) -> None:
    """The page's metrics, charts and verdict over this run and the compared ones, then the table of records."""
    draw([view_of(run)._replace(rows=snap.rows), *compare], t, f"{run.run_id}-{snap.version}")
    busy_note(t, run.state)
    st.subheader(t("common.table"))
    table = records.table(snap.rows)
    if "error" in table and len(table) == len(snap.rows):  # each record's error in the page's language, read from
        table["error"] = [in_words(row.error, t) for row in snap.rows]  # the record (a table's cell is a plain str)
    st.dataframe(
        table,
        hide_index=True,
        key=f"table-{run.run_id}-{snap.version}",
        column_config={c: st.column_config.Column(help=t(f"table.{c}")) for c in EXPLAINED_COLUMNS},
    )


def show_run(run: BackgroundRun | None, draw: DrawRuns, experiment: str, records: Records = ROUNDS) -> None:
    """Draw the run and keep redrawing after every round until it ends or is stopped."""
    t = texts()
    store_notice(t)
    session_only = [r for r in session_runs(experiment) if r is not run and r.rows and r.settings.get("recorded")]
    compare_ids, compare = saved_compare(t, experiment, run.run_id if run else None, session_only)
    if run is None:
        st.info(t(records.empty))
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
            unsaved = run_store().problem if run_store().unsaved else ""  # the database gone mid-run: said now
            line = (snap.status, len(snap.rows), snap.progress, snap.warning, snap.queue_position,
                    snap.expected_wait_s, run.cancel.is_set(), unsaved)
            if line != shown_line:  # the browser re-renders what it is sent: send the status only when it changed
                shown_line = line
                with status_box.container():
                    _status(t, run, snap, records)
                    if snap.warning:
                        st.warning(snap.warning, icon=":material/warning:")
                    if unsaved:
                        st.warning(t("runs.store_problem", problem=unsaved), icon=":material/database:")
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
                    _draw_rounds(t, run, snap, draw, records, compare)
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
    offer_downloads(t, run, snap, records, compare_ids)
    saved_list(t, experiment)



def explain(t: Texts, section: str, run: RunView[Any] | None, notes: Sequence[str] = ()) -> Conclusion | None:
    """'What you should see' beside 'what this run showed': the run's one conclusion (`conclusion_of`: the one kept
    with it, else computed from its records and the machine's state), in the reader's words, then the page's
    ``notes`` (what this machine's roofs allow beside it). Returns the conclusion, for the page's own use."""
    conclusion = conclusion_of(EXPERIMENTS[section], run.rows, run.state, run.conclusion) if run is not None else None
    text = " ".join([paragraph(conclusion, t) if conclusion else "", *[n for n in notes if n]])
    left, right = st.columns(2)
    with left:
        st.markdown(f"**{t('common.what_to_see')}**  \n" + t.rich(f"{section}.expect"), unsafe_allow_html=True)
    with right:
        st.markdown(f"**{t('common.verdict')}**")
        (st.success if conclusion and conclusion.shown else st.info)(text)
    return conclusion
