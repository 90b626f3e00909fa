"""The home page's one button: measure this machine, then speak in its numbers.

It runs, one after another through the shared run machinery (`ui.runs.start_run`), experiment
5 (the probe and one request), then short runs of experiments 1 and 2 (`QUICK`: about a minute on
2 cores). Not experiment 4: within that minute (N = 1 and 4, 32-token answers) it measured 0.4x on a
2-core machine where its page, at its defaults (N up to 8, 128-token answers), showed 1.8x; a quick
run must not be quoted as if it had measured batching. The roofs' bound G still says what experiment
4 can show here. Each run lands in the session's history like any other, so every page quotes it from
then on. The chain lives in session state: a rerun (a click, a page switch and back) picks it up;
Stop ends the current run and the chain, keeping what was measured. A hosted deploy does not offer
it: the probe loads every core of the machine it runs on.
"""

from __future__ import annotations

import time
from typing import Any

import streamlit as st

from core.experiments import EXPERIMENTS, input_length, output_length, roofline
from core.runs.runner import FAILED
from ui.runs import ExperimentPlan, busy_note, latest_saved, session_runs, start_run
from ui.session import hosted
from ui.text import Texts

CHAIN_KEY = "measure_machine_chain"  # the ids still to run, the current one first
QUICK: dict[str, Any] = {
    roofline.ID: roofline.Settings(),
    input_length.ID: input_length.Settings(sizes=(256, 1024)),
    output_length.ID: output_length.Settings(lengths=(16, 64)),
}


def _current(experiment: str) -> Any:
    runs = session_runs(experiment)
    return runs[-1] if runs else None


def _busy_notes(t: Texts) -> None:
    """The quick run's busy notes: its runs' numbers are quoted below, so a busy machine is said here too (the
    session's runs, else the newest saved ones after a reload)."""
    for experiment in QUICK:
        run = _current(experiment) or latest_saved(experiment)
        if run is not None:
            busy_note(t, run.state, about=t(f"{experiment}.title"))


def measure_machine_button(t: Texts) -> None:
    """The button, and while the chain runs: which step, its progress, and Stop."""
    if hosted().hosted:  # the probe would load every core of a shared server: not offered there
        return
    chain: list[str] = st.session_state.get(CHAIN_KEY) or []
    if not chain:
        if st.button(t("home.measure_machine"), type="primary", icon=":material/speed:", key="measure_machine"):
            st.session_state[CHAIN_KEY] = chain = list(QUICK)
            st.session_state[f"{CHAIN_KEY}_started"] = False
        else:
            st.caption(t("home.measure_machine_help"))
            _busy_notes(t)
            return
    if st.button(t("common.stop"), icon=":material/stop:", key="measure_machine_stop"):
        run = _current(chain[0])
        if run is not None and run.active:
            run.stop()
        st.session_state[CHAIN_KEY] = []
        st.rerun()
    box = st.empty()
    total = len(QUICK)
    while chain:
        experiment = chain[0]
        if not st.session_state.get(f"{CHAIN_KEY}_started"):
            spec = EXPERIMENTS[experiment]
            if start_run(ExperimentPlan.of(spec, QUICK[experiment])) is None:  # the reason is on the page
                st.session_state[CHAIN_KEY] = []
                return
            st.session_state[f"{CHAIN_KEY}_started"] = True
        run = _current(experiment)
        step = total - len(chain)
        while run is not None and run.active:
            snap = run.snapshot()
            done = len(snap.rows) / max(run.planned_rounds, 1)
            box.progress(min((step + done) / total, 1.0),
                         text=t("home.measuring_step", i=step + 1, n=total, name=t(f"nav.{experiment}")))
            run.wait_for_change(snap.version, 0.5)
        if run is not None and run.snapshot().status == FAILED:  # the backend broke: the rest would fail too
            st.session_state[CHAIN_KEY] = []
            st.error(t("home.measure_failed", name=t(f"nav.{experiment}")), icon=":material/error:")
            return
        chain = chain[1:]
        st.session_state[CHAIN_KEY] = chain
        st.session_state[f"{CHAIN_KEY}_started"] = False
        time.sleep(0.05)
    st.rerun()  # draw the page again in this machine's numbers
