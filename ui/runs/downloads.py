"""A run's table of rounds and its downloads: CSV, JSON and the HTML report."""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd
import streamlit as st

from core.export import to_csv
from core.records import RoundResult
from core.runs.runner import BackgroundRun, Snapshot
from core.words import in_words
from ui.runs.contract import Records
from ui.runs.saved import export_text, report_maker
from ui.text import Texts

TABLE_COLUMNS = ["round", "strategy", "target_tokens", "prompt_tokens", "recomputed_tokens", "cached_tokens",
                 "cache_write_tokens", "prefill_ms", "first_reasoning_ms", "ttft_ms", "output_tokens", "decode_ms",
                 "total_ms", "ms_per_output_token", "prefill_source", "decode_source", "usage_source", "error"]
EXPLAINED_COLUMNS = ["prefill_ms", "ttft_ms", "decode_ms", "ms_per_output_token", "cached_tokens", "prefill_source",
                     "decode_source", "usage_source"]  # where each number comes from: a tooltip on the header



def rounds_table(rows: Sequence[RoundResult]) -> pd.DataFrame:
    frame = pd.DataFrame.from_records([r.to_dict() for r in rows])
    if frame.empty:
        return frame
    return frame[[c for c in TABLE_COLUMNS if c in frame and frame[c].notna().any() or c == "error"]]


def round_name(row: RoundResult) -> str:
    return f"round {row.round}{' · ' + row.strategy if row.strategy else ''}"


ROUNDS = Records(table=rounds_table, name=round_name)


def offer_downloads(t: Texts, run: BackgroundRun, snap: Snapshot, records: Records, compare_ids: Sequence[str]) -> None:
    for row in snap.rows:
        if row.error:
            st.error(f"{records.name(row)}: {in_words(row.error, t)}")
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
        export_text(run, snap.rows),
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

