"""The cache doctor page's "Prove the fix" section: the fixed log to download, and its replay before and
after on the sidebar's llama-server, drawn per round.

The replay runs in the script thread (two short replays of the log's rounds, under the server's run
lock so no other session's run evicts the cache in between) and is kept per input and server, so a
click elsewhere on the page does not run it again.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import altair as alt
import pandas as pd
import streamlit as st

from core import doctor
from core.backends import BACKENDS
from core.charts.palette import CACHE_HIT, PREFILL
from core.doctor import fix
from core.records import RoundResult
from core.runs.runner import server_lock
from core.words import in_words, said
from ui.session import BACKEND_KEY
from ui.sidebar import connect, current_target
from ui.text import Texts


def proof_chart(table: Sequence[fix.ProofRound], t: Texts) -> alt.Chart:
    """Tokens the server recomputed per round: as logged (prefill colour) and fixed (cache-hit colour)."""
    before, after = t("doctor_fix.series_before"), t("doctor_fix.series_after")
    rows = [{"round": r.round, "series": name, "tokens": value} for r in table
            for name, value in ((before, r.before_recomputed), (after, r.after_recomputed)) if value is not None]
    return alt.Chart(pd.DataFrame(rows)).mark_bar().encode(
        x=alt.X("round:O", title=t("cache.x"), axis=alt.Axis(labelAngle=0)),
        xOffset=alt.XOffset("series:N", sort=[before, after]),
        y=alt.Y("tokens:Q", title=t("doctor_fix.y")),
        color=alt.Color("series:N", title=None, legend=alt.Legend(orient="bottom"),
                        scale=alt.Scale(domain=[before, after], range=[PREFILL, CACHE_HIT])),
        tooltip=["round", "series", alt.Tooltip("tokens:Q", format=",")],
    ).properties(title=t("doctor_fix.chart_title"), height=280)


def _run(original: doctor.Transcript, fixed: doctor.Transcript, t: Texts) -> list[RoundResult] | str:
    """Both replays on the sidebar's server, with progress; a sentence when the server cannot be used."""
    target = current_target()
    lock = server_lock(target.lock_key() or target.url)  # a llama-server's lock, shared with the app's runs and the CLI
    if not lock.acquire(timeout=1.0):
        return t("doctor_fix.busy")
    rows: list[RoundResult] = []
    total = len(original.rounds) + len(fixed.rounds)
    try:
        with connect(target) as conn, st.status(t("doctor_fix.running", i=0, n=total)) as status:
            for row in fix.prove(original, fixed, conn.backend):
                rows.append(row)
                status.update(label=t("doctor_fix.running", i=len(rows), n=total))
            status.update(label=t("doctor_fix.done", n=len(rows)), state="complete")
    except Exception as exc:  # noqa: BLE001 - shown to the user; rows measured so far are kept
        if not rows:
            return f"{t('common.backend_error')} {exc}"
        st.warning(f"{t('common.backend_error')} {exc}", icon=":material/warning:")
    finally:
        lock.release()
    return rows


def _nothing(left: list[str], t: Texts) -> None:
    causes = ", ".join(t(f"cause.{c}") for c in left) or t("cause.none")
    st.info(t("doctor_fix.nothing", left=causes), icon=":material/info:")


def proven_fix_section(name: str, data: bytes, transcript: doctor.Transcript, analysis: doctor.Analysis, digest: str,
                       t: Texts, fmt: str | None = None) -> None:
    """Fix what can be fixed mechanically; offer the fixed log; prove it on a llama-server when asked
    (``analysis``: the page's analysis of ``transcript``; ``fmt``: the format the page was told to read
    every line in, if any)."""
    if transcript.kind not in ("jsonl", "json"):
        return
    st.subheader(t("doctor_fix.title"))
    st.caption(t("doctor_fix.caption"))
    if not fix.fixable(analysis):  # the log is not parsed again (a 42 MB log held 3.13 GB instead of 1.28)
        _nothing(fix.left_causes(analysis), t)
        return
    key = f"doctor_fix_log_{digest}"
    if key not in st.session_state:  # fixed once per input, not again on every rerun
        try:
            st.session_state[key] = fix.fix_log(name, data.decode("utf-8"), fmt, transcript, analysis)
        except (doctor.TranscriptError, UnicodeDecodeError) as exc:
            st.session_state[key] = said(exc)
    fixed: fix.FixedLog | str = st.session_state[key]
    if isinstance(fixed, str):
        st.warning(f"{t('doctor_fix.cannot')} {in_words(fixed, t)}", icon=":material/warning:")
        return
    if not fixed.fixed:
        _nothing(fixed.left, t)
        return
    for cause in fixed.fixed:
        st.markdown(f"- {t(f'doctor_fix.did.{cause}')}")
    after = fixed.after.first_break if fixed.after else None
    if after is None:
        st.success(t("doctor_fix.no_break"), icon=":material/check_circle:")
    else:
        st.warning(t("doctor_fix.still", round=after.round, cause=t(f"cause.{after.cause}")), icon=":material/warning:")
    suffix = ".jsonl" if fixed.kind == "jsonl" else ".json"
    st.download_button(t("doctor_fix.download"), fixed.text, file_name=f"{Path(name).stem}.fixed{suffix}",
                       mime="application/json", key=f"doctor_fix_download_{digest}", icon=":material/download:")
    if not BACKENDS[st.session_state.get(BACKEND_KEY, "local")].is_llama_server:
        st.info(t("doctor_fix.needs_server"), icon=":material/dns:")
        return
    key = f"doctor_fix_proof_{digest}"
    if st.button(t("doctor_fix.run"), key=f"doctor_fix_run_{digest}", icon=":material/science:"):
        result = _run(transcript, fix.fixed_transcript(name, fixed, fmt), t)
        if isinstance(result, str):
            st.error(result, icon=":material/error:")
        else:
            st.session_state[key] = result
    rows = st.session_state.get(key)
    if rows:
        _show(rows, t, digest)


def _show(rows: list[RoundResult], t: Texts, digest: str) -> None:
    table = fix.proof_table(rows)
    for failed in (r for r in rows if r.error):
        st.error(t("doctor_fix.failed", round=failed.round, which=t(f"doctor_fix.series_{failed.strategy}"),
                   error=failed.error), icon=":material/error:")
    later = [r for r in table[1:] if r.before_recomputed is not None and r.after_recomputed is not None]
    if later:
        before = sum(r.before_recomputed or 0 for r in later)
        after = sum(r.after_recomputed or 0 for r in later)
        a, b, c = st.columns(3)
        a.metric(t("doctor_fix.metric_before"), f"{before:,}")
        b.metric(t("doctor_fix.metric_after"), f"{after:,}")
        c.metric(t("doctor_fix.metric_saved"), f"{before - after:,}")
    st.altair_chart(proof_chart(table, t), width="stretch", key=f"doctor-fix-chart-{digest}")
    st.dataframe(pd.DataFrame([r.to_dict() for r in table]), hide_index=True, key=f"doctor-fix-table-{digest}")
    st.caption(t("doctor_fix.round_one"))
