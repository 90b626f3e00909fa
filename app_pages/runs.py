"""Saved runs: every run of the app and the CLI, with import, rename, delete and an HTML report."""

import streamlit as st

from core.store import MEMORY
from ui.runs import (
    choice_label,
    hosted_visitor,
    import_upload,
    report_maker,
    run_store,
    runs_table,
    saved_runs,
    store_notice,
)
from ui.session import hosted
from ui.text import texts

t = texts()
st.title(t("runs.title"))
st.markdown(t("runs.intro"))
store = run_store()
store_notice(t)
if not store.problem:
    st.caption(t("runs.stored_memory") if store.location == MEMORY else t("runs.stored_where", where=store.location))
if hosted().hosted:
    st.caption(t("runs.hosted_note"))
elif store.shared:
    st.caption(t("runs.team_note", author=store.author))

upload = st.file_uploader(t("runs.import_file"), type=["json"], key="runs_import")
done = st.session_state.setdefault("runs_imported", set())
if upload is not None and upload.file_id not in done:  # once per upload, not on every rerun
    done.add(upload.file_id)
    import_upload(t, upload.name, upload.getvalue())

runs = saved_runs()
if not runs:
    st.info(t("runs.none"))
    st.stop()
st.dataframe(runs_table(t, runs, experiment_column=True), hide_index=True, key="all-runs")
names = {run.id: choice_label(run) for run in runs}
if "runs_chosen" in st.session_state:
    st.session_state["runs_chosen"] = [c for c in st.session_state["runs_chosen"] if c in names]


def rename(run_id: str, key: str) -> None:
    label = st.session_state[key].strip()
    if label:
        store.rename(run_id, label, owner=hosted_visitor())


def delete(run_ids: list[str]) -> None:
    st.session_state["runs_deleted"] = sum(store.delete(run_id, owner=hosted_visitor()) for run_id in run_ids)
    st.session_state["runs_chosen"] = []  # a callback runs before the widget, so it may clear it


if "runs_deleted" in st.session_state:
    st.toast(t("runs.deleted", n=st.session_state.pop("runs_deleted")))
chosen = st.multiselect(t("runs.choose"), list(names), format_func=names.__getitem__, placeholder=t("common.choose"),
                        key="runs_chosen")
others = [] if hosted().hosted else [r.label for r in runs if r.id in chosen and not store.mine(r)]
if others:
    st.caption(t("runs.not_yours", runs=", ".join(others), author=store.author))
if chosen:
    left, middle, right = st.columns([2, 1, 1.2], vertical_alignment="bottom")
    if len(chosen) == 1 and not others:
        key = f"runs_label_{chosen[0]}"
        left.text_input(t("runs.rename"), value=next(r.label for r in runs if r.id == chosen[0]), key=key)
        left.button(t("runs.rename_button"), icon=":material/edit:", on_click=rename, args=(chosen[0], key))
    middle.button(t("runs.delete_button"), icon=":material/delete:", on_click=delete, args=(list(chosen),),
                  disabled=bool(others))
    right.download_button(t("runs.download_report"), report_maker(t, chosen), "prefill-lab-report.html",
                          "text/html", on_click="ignore", icon=":material/description:", key="runs-report")
