"""Cache doctor: which round of your own transcript broke the prefix cache, where, why, and the cost."""

import hashlib
from collections.abc import Iterator, Sequence
from typing import Any

import pandas as pd
import streamlit as st

from core import doctor
from core.backends import BACKENDS
from core.backends.connect import Connection
from core.charts.base import RunView
from core.charts.doctor import doctor_chart
from core.experiments.base import Plan, RunContext, Source
from core.records import RoundResult
from ui.doctor.fix import proven_fix_section
from ui.doctor.sections import (
    audit_section,
    billing_section,
    diagnosis_section,
    measured_section,
    timeline_section,
    unexplained_section,
)
from ui.runs.contract import ExperimentPlan
from ui.runs.controls import run_controls
from ui.runs.loop import show_run
from ui.runs.visitor import bounded_uploads, free_uploads_when_gone
from ui.session import BACKEND_KEY, hosted
from ui.sidebar.target import connect, current_target
from ui.text import Texts, texts

t = texts()
st.title(t("doctor.title"))
st.markdown(t.rich("doctor.idea"), unsafe_allow_html=True)
with st.expander(t("doctor_input.capture_title")):
    st.markdown(t("doctor_input.capture"))

limits = hosted()
most_bytes = limits.max_doc_bytes if limits.hosted else doctor.MAX_DOCTOR_BYTES
files = st.file_uploader(t("doctor.upload"), accept_multiple_files=True, key="doctor_files",
                         max_upload_size=max(1, round(most_bytes / 2**20)) if limits.hosted else None)
free_uploads_when_gone()
files, uploaded = bounded_uploads(files or [], limits.max_doctor_files, most_bytes)
if len(files) < uploaded:
    st.error(t("doctor.too_many_files", n=uploaded, most=limits.max_doctor_files) if uploaded > limits.max_doctor_files
             else t("doctor.too_large_total", mb=sum(f.size for f in files) / 2**20, most=most_bytes / 2**20),
             icon=":material/error:")
pasted = st.text_area(t("doctor.paste"), key="doctor_paste", height=100)
server_ready = BACKENDS[st.session_state.get(BACKEND_KEY, "local")].is_llama_server
use_server = st.toggle(t("doctor.use_server"), value=server_ready, disabled=not server_ready, key="doctor_use_server",
                       help=t("doctor.use_server_help"))

formats = [None, *doctor.FORMATS]
log_format = st.selectbox(t("doctor_input.format_select"), formats, key="doctor_format",
                          help=t("doctor_input.format_help"),
                          format_func=lambda f: t("doctor_input.format_auto") if f is None else f)
inputs = [(f.name, f.getvalue()) for f in files or []]
if not inputs and pasted.strip():
    inputs = [("pasted.jsonl", pasted.encode())]
if not inputs:
    st.info(t("doctor.empty"))
    st.stop()
# parsed once per input and kept with its analyses, so a click elsewhere on the page does not redo them
digest = hashlib.sha256(b"".join(data for _, data in inputs) + str(log_format).encode()).hexdigest()
cached: dict[str, Any] | None = st.session_state.get("doctor_input")
if cached is None or cached["digest"] != digest:
    try:
        parsed = doctor.load_inputs(inputs, most_bytes, log_format)
    except doctor.TranscriptError as exc:
        st.error(f"{t('doctor.error')} {exc}", icon=":material/error:")
        st.stop()
    cached = st.session_state["doctor_input"] = {"digest": digest, "transcript": parsed, "analyses": {}}
kept: dict[str, Any] = cached
transcript = kept["transcript"]
decision = doctor.comparison(transcript, ", ".join(n for n, _ in inputs))  # what is compared: the CLI's call too
if decision.kind == doctor.UNREAD:
    st.error(t("doctor_input.unread") + "\n\n" + "\n".join(f"- {e}" for e in transcript.errors[:20]),
             icon=":material/error:")
    st.stop()
for problem in transcript.errors:
    st.warning(t("doctor.skipped", error=problem), icon=":material/warning:")
st.caption(t("doctor_input.formats", name=", ".join(n for n, _ in inputs), formats=", ".join(transcript.formats),
             rounds=len(transcript.rounds)))
if transcript.mixed:
    st.warning(t("doctor_input.mixed", mixed=transcript.mixed), icon=":material/call_split:")

if decision.kind == doctor.SINGLE_ROUND:
    st.error(t("doctor.single_round", name=decision.name), icon=":material/error:")
    st.stop()
if decision.kind == doctor.SIMULATE:
    st.subheader(t("doctor.compare_title"))
    st.caption(t("doctor.compare_caption"))
transcripts = decision.transcripts


def analyse_cached(name: str, item: doctor.Transcript) -> doctor.Analysis | str:
    """Analysis per transcript and backend, kept with the input (rendering with a server costs requests)."""
    cache = kept["analyses"]
    target = current_target() if use_server else None
    key = (name, target.url if target else None)
    if key not in cache:
        if target is None:
            cache[key] = doctor.analyse(item)
        else:
            try:
                conn = connect(target)
            except Exception as exc:  # noqa: BLE001 - shown to the user; the static analysis still works
                return f"{t('common.backend_error')} {exc}"
            with conn:
                cache[key] = doctor.analyse(item, conn.counter, conn.backend)
    return cache[key]


def cause_text(finding: doctor.RoundFinding) -> str:
    values = {"round": finding.round, "cause": t(f"cause.{finding.cause}"), "char": finding.first_diff_char or 0,
              "message": finding.message_index, "field": finding.field}
    return t("doctor.broke_tools" if finding.message_index is None else "doctor.broke", **values)


def show_analysis(name: str, analysis: doctor.Analysis) -> None:
    findings = [f.to_dict() for f in analysis.findings]
    st.caption(t("doctor.rendering", rounds=len(findings), how=analysis.rendering,
                 exact=t("doctor.exact") if analysis.findings[0].tokens_exact else t("doctor.estimated")))
    first = analysis.first_break
    if first:
        st.error(cause_text(first), icon=":material/heart_broken:")
        st.markdown(f"**{t('doctor.fix')}:** {t(f'fix.{first.cause}')}")
    elif any(f.cause == doctor.SERVER_HISTORY for f in analysis.findings):
        st.info(t("doctor_input.server_history"), icon=":material/cloud:")
    elif analysis.errors:
        st.warning(t("doctor_input.partial", rounds=len(findings), unread=len(analysis.errors)),
                   icon=":material/warning:")
    else:
        later = [f.recomputed_tokens for f in analysis.findings[1:]] or [analysis.findings[0].recomputed_tokens]
        st.success(t("doctor.clean", median=sorted(later)[len(later) // 2]), icon=":material/check_circle:")
    totals = analysis.totals()
    a, b, c, d = st.columns(4)
    a.metric(t("doctor.metric_rounds"), len(findings))
    b.metric(t("doctor.metric_recomputed"), f"{totals['recomputed']:,}")
    c.metric(t("doctor.metric_append"), f"{totals['append_only']:,}")
    fractions = sorted(f.cacheable_fraction for f in analysis.findings[1:]) or [0.0]
    d.metric(t("doctor.metric_cacheable"), f"{fractions[len(fractions) // 2]:.0%}")
    st.altair_chart(doctor_chart(findings, t), width="stretch", key=f"doctor-chart-{name}")
    table = pd.DataFrame(findings).drop(columns=["old_snippet", "new_snippet"])
    table["cause"] = table["cause"].map(lambda c: t(f"cause.{c}"))
    st.dataframe(table, hide_index=True, key=f"doctor-table-{name}")
    breaking = [f for f in analysis.findings if f.breaks_cache][:10]
    if breaking:
        st.subheader(t("doctor.breaks"))
    for finding in breaking:
        with st.expander(cause_text(finding), expanded=finding is first):
            left, right = st.columns(2)
            left.caption(t("doctor.previous", round=finding.round - 1))
            left.html(f"<pre style='white-space:pre-wrap;font-size:0.8em'>{finding.old_snippet}</pre>")
            right.caption(t("doctor.current", round=finding.round))
            right.html(f"<pre style='white-space:pre-wrap;font-size:0.8em'>{finding.new_snippet}</pre>")
            st.markdown(f"**{t('doctor.fix')}:** {t(f'fix.{finding.cause}')}")
    measured_section(name, findings, t)
    unexplained_section(findings, t)
    diagnosis_section(name, findings, t)
    timeline_section(name, findings, t)
    audit_section(name, analysis, t)
    billing_section(name, analysis, t)


analyses: dict[str, doctor.Analysis] = {}
tabs = st.tabs([t(f"strategy.{name}") if name in doctor.SIMULATED_STRATEGIES else t("nav.doctor")
                for name in transcripts])
for tab, (name, item) in zip(tabs, transcripts.items(), strict=True):
    with tab:
        result = analyse_cached(name, item)
        if isinstance(result, str):
            st.error(result)
            result = doctor.analyse(item)
        analyses[name] = result
        show_analysis(name, result)

if len(inputs) == 1:
    proven_fix_section(inputs[0][0], inputs[0][1], transcript, digest, t, log_format)

st.subheader(t("doctor.replay"))
st.caption(t("doctor.replay_help"))


def make_source(conn: Connection) -> Source:
    def rows(run: RunContext) -> Iterator[RoundResult]:
        for name, item in transcripts.items():
            yield from doctor.replay(item, run.backend, run.cancel, run.progress, label=name)
    return rows


def draw(runs: Sequence[RunView[RoundResult]], t: Texts, key: str) -> None:
    """Measured against predicted, per transcript, redrawn after every replayed round."""
    rows = runs[0].rows
    for name, analysis in analyses.items():
        mine, slot = [r for r in rows if r.strategy == name], st.empty()
        if mine:
            chart = doctor_chart([f.to_dict() for f in analysis.findings], t, mine)
            slot.altair_chart(chart, width="stretch", key=f"doctor-replay-{name}-{key}")


replay_plan = Plan(sum(len(item.rounds) for item in transcripts.values()),
                   sum(f.prompt_tokens + doctor.REPLAY_ANSWER_TOKENS for a in analyses.values() for f in a.findings))
plan = ExperimentPlan("doctor", {"inputs": [n for n, _ in inputs], "rounds": replay_plan.requests}, replay_plan,
                      make_source)
show_run(run_controls(plan, recorded=False), draw, "doctor")
