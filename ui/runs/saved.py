"""The run store in the app: one per process, each visitor's share of it, saving a run as it goes.

Local install: every run is the user's; ``owner`` is "" and every page sees every run (the CLI's
too). Hosted mode (`core.hosting`): a visitor is an unguessable random id kept in the page's URL
(``?visitor=…``), so a reload of the tab, or the link bookmarked, finds the same runs, and
another visitor, with another id, never sees them. No cookie is set (Streamlit cannot set one
without a component) and ``st.context`` holds nothing that outlives a reload. A visitor's runs are
deleted a day after they started (`core.store.db.VISITOR_KEEP_S`). The operator turns the disk off
with ``PREFILL_LAB_DB = ":memory:"``: runs then live in this process's memory, still per visitor.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Callable, Sequence

import pandas as pd
import streamlit as st

from core.charts.base import RunView
from core.experiments import records_key
from core.export import Record, to_json
from core.report import build_report
from core.runs import RUNNING, STOPPED, BackgroundRun
from core.store import (
    AUTHOR_ENV,
    CUT,
    ENV,
    MEASURED,
    ImportRefused,
    RunStore,
    SavedRun,
    default_location,
    export_run,
    import_export,
    machine_info,
    machine_name,
    open_store,
)
from core.store.dates import run_date
from core.words import in_words, said
from ui.session import hosted, secret
from ui.text import Texts, language

VISITOR_PARAM = "visitor"
VISITOR_KEY = "visitor_id"
_VISITOR_ID = re.compile(r"^[A-Za-z0-9_-]{22,64}$")


@st.cache_resource(show_spinner=False)
def _open(location: str, author: str) -> RunStore:
    store = open_store(location)
    if author:
        store.author = author
    return store


def run_store() -> RunStore:
    """The store this app writes to: ``PREFILL_LAB_DB`` from the secrets or the environment, else the default;
    its runs' author ``PREFILL_LAB_AUTHOR`` from either, else the store's default (`core.store.db.default_author`)."""
    return _open(secret(ENV) or default_location(), secret(AUTHOR_ENV) or "")


def hosted_visitor() -> str | None:
    """None on a local install; in hosted mode this visitor's id, kept in (and read back from) the URL."""
    if not hosted().hosted:
        return None
    vid = st.session_state.get(VISITOR_KEY)
    if not vid:
        given = st.query_params.get(VISITOR_PARAM, "")
        vid = given if _VISITOR_ID.match(given) else secrets.token_urlsafe(24)
        st.session_state[VISITOR_KEY] = vid
    if st.query_params.get(VISITOR_PARAM) != vid:  # a page switch drops the query: put it back
        st.query_params[VISITOR_PARAM] = vid
    return str(vid)


def owner() -> str:
    """The owner written on this session's runs: the visitor's id, "" on a local install."""
    return hosted_visitor() or ""


def saved_runs(experiment: str | None = None) -> list[SavedRun]:
    """The runs this session may see, newest first."""
    return run_store().runs(experiment, owner=hosted_visitor())


def export_text(run: BackgroundRun, rows: Sequence[Record]) -> str:
    """The run's JSON download: a saved run's export (its machine's state and conclusion with it, the same file
    as ``python -m core runs export``), else, for a run never saved (the shipped results), its settings and rows."""
    saved = run_store().get(run.run_id, owner=hosted_visitor()) if not run.settings.get("recorded") else None
    if saved is not None and saved.id == run.run_id:
        return export_run(saved, rows)
    return to_json(run.settings, {records_key(run.experiment): rows})


def as_run(saved: SavedRun) -> BackgroundRun:
    """A saved run as the page shows a finished run (a cut one as stopped: its rounds are all there is)."""
    run = BackgroundRun.recorded(saved.experiment, saved.settings, run_store().records(saved.id), saved.label)
    run.run_id = saved.id
    run.state, run.conclusion = saved.state, saved.conclusion  # the busy note and the conclusion after a reload
    if saved.status in (STOPPED, CUT):
        run.status = STOPPED
    return run


def runs_table(t: Texts, runs: Sequence[SavedRun], experiment_column: bool = False) -> pd.DataFrame:
    """What the lists show: label, machine (and author, on a team's store), model, date, rounds, status, source."""
    authors = any(run.author for run in runs)
    return pd.DataFrame([{
        t("runs.col_label"): run.label,
        **({t("runs.col_experiment"): run.experiment} if experiment_column else {}),
        t("runs.col_machine"): machine_name(run.machine),
        **({t("runs.col_author"): run.author} if authors else {}),
        t("runs.col_model"): run.model,
        t("runs.col_date"): run_date(run.started_at),
        t("runs.col_rounds"): run.rounds,
        t("runs.col_status"): t(f"runs.status_{run.status}"),
        t("runs.col_source"): t(f"runs.source_{run.source}"),
    } for run in runs])


def choice_label(run: SavedRun) -> str:
    """A saved run as a choice names it: its label, machine, author and date, and the start of its id (as
    ``runs list`` prints it), so two runs started the same minute never read the same."""
    by = f" · {run.author}" if run.author else ""
    return f"{run.label} · {machine_name(run.machine)}{by} · {run_date(run.started_at)} · #{run.id[:6]}"


def report_maker(t: Texts, run_ids: Sequence[str]) -> Callable[[], str]:
    """What a download button calls to build the HTML report of these saved runs, in the page's language.

    Streamlit calls it on another thread, outside the script (no session state there), so the store,
    the visitor and the language are taken now.
    """
    store, who, lang, ids = run_store(), hosted_visitor(), language(), list(run_ids)

    def make() -> str:
        entries = [(saved, store.records(saved.id)) for run_id in ids
                   if (saved := store.get(run_id, owner=who)) is not None]
        return build_report(entries, t, lang)

    return make


def store_notice(t: Texts) -> None:
    """Say when runs are not being saved, and why (after trying once more to write what waits)."""
    store = run_store()
    if store.unsaved:
        store.flush()
    if store.problem:
        st.warning(t("runs.store_problem", problem=store.problem), icon=":material/database:")


def latest_saved(experiment: str) -> BackgroundRun | None:
    """The newest run of ``experiment`` measured here (not imported, not the reference) that has ended and
    measured something, as a finished run."""
    for saved in run_store().runs(experiment, owner=hosted_visitor(), source=MEASURED):
        if saved.status != RUNNING and saved.rounds:
            return as_run(saved)
    return None


def saved_compare(t: Texts, experiment: str, current_id: str | None,
                  session_only: Sequence[BackgroundRun]) -> tuple[list[str], list[RunView]]:
    """Let the reader tick saved runs of this experiment (newest first) to draw beside the current one;
    ``session_only`` are runs shown but never saved (the shipped recorded results).

    Returns the ticked saved runs' ids (for the report) and every ticked run as a `RunView`.
    """
    runs = [r for r in saved_runs(experiment) if r.id != current_id]
    names = {f"session:{r.run_id}": r.label for r in session_only} | {r.id: choice_label(r) for r in runs}
    if not names:
        return [], []
    key = f"compare_{experiment}"
    if key in st.session_state:  # a run deleted elsewhere is no longer offered
        st.session_state[key] = [c for c in st.session_state[key] if c in names]
    chosen = st.multiselect(t("common.compare"), list(names), format_func=names.__getitem__,
                            placeholder=t("common.choose"), key=key, help=t("runs.saved_help"))
    store = run_store()
    views = [RunView(r.label, r.rows) for r in session_only if f"session:{r.run_id}" in chosen]
    ids = [c for c in chosen if not c.startswith("session:")]
    here, me = machine_name(machine_info()), store.author
    labels = {r.id: " · ".join([r.label, *([machine_name(r.machine)] if machine_name(r.machine) != here else []),
                                *([r.author] if r.author and r.author != me else [])])
              for r in runs}  # another machine's or another author's run says whose on the chart
    records = store.records_of(ids)
    return ids, views + [RunView(labels[i], records[i]) for i in ids]


def saved_list(t: Texts, experiment: str) -> None:
    """This experiment's saved runs, newest first: label, machine, model, date, rounds, status."""
    runs = saved_runs(experiment)
    if runs:
        with st.expander(f"{t('runs.saved')} ({len(runs)})"):
            st.dataframe(runs_table(t, runs), hide_index=True, key=f"saved-{experiment}", height=240)


def import_upload(t: Texts, name: str, data: bytes) -> None:
    """Import an uploaded export into this visitor's runs; say what came in, or why not (file and line)."""
    try:
        ids = import_export(run_store(), data, name, owner=owner())
    except ImportRefused as exc:
        st.error(t("runs.import_refused", error=in_words(said(exc), t)))
    else:
        st.success(t("runs.imported", n=len(ids), name=name))
