"""The cache doctor's findings on the page: the uploads read once and kept with their analyses, and one
transcript's findings drawn (the first break, its fix, totals, chart, table, each break, then the sections)."""

from __future__ import annotations

import hashlib
from typing import Any

import pandas as pd
import streamlit as st

from core import doctor
from core.charts.doctor import doctor_chart
from core.stats import median
from core.words import in_words
from ui.doctor.sections import (
    audit_section,
    billing_section,
    diagnosis_section,
    measured_section,
    timeline_section,
    unexplained_section,
)
from ui.runs import compaction_measured
from ui.sidebar import connect, current_target
from ui.text import Texts


def read_inputs(t: Texts, inputs: list[tuple[str, bytes]], most_bytes: int, log_format: str | None) -> dict[str, Any]:
    """The uploads parsed once and kept in the session with their analyses (``digest``, ``transcript``,
    ``analyses``), so a click elsewhere on the page does not redo them; a sentence and a stop when unreadable."""
    digest = hashlib.sha256(b"".join(data for _, data in inputs) + str(log_format).encode()).hexdigest()
    cached: dict[str, Any] | None = st.session_state.get("doctor_input")
    if cached is None or cached["digest"] != digest:
        try:
            parsed = doctor.load_inputs(inputs, most_bytes, log_format)
        except doctor.TranscriptError as exc:
            st.error(f"{t('doctor.error')} {in_words(exc.args[0], t) if exc.args else exc}", icon=":material/error:")
            st.stop()
        cached = st.session_state["doctor_input"] = {"digest": digest, "transcript": parsed, "analyses": {}}
    return cached


def analysed(t: Texts, kept: dict[str, Any], name: str, item: doctor.Transcript,
             use_server: bool) -> doctor.Analysis | str:
    """Analysis per transcript and backend, kept with the input (rendering with a server costs requests); a
    sentence when the server cannot be reached."""
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


def cause_text(t: Texts, finding: doctor.RoundFinding) -> str:
    char = finding.field_char if finding.field_char is not None else finding.first_diff_char
    values = {"round": finding.round, "cause": t(f"cause.{finding.cause}"), "char": char or 0,
              "message": finding.message_index, "field": finding.field}
    if finding.message_index is not None:
        return t("doctor.broke", **values)
    if finding.parameter is not None:
        return t("doctor.broke_parameter", **values, parameter=finding.parameter, old=finding.old_value,
                 new=finding.new_value)
    head = {"params": "doctor.broke_params", "model": "doctor.broke_model"}
    return t(head.get(finding.field or "", "doctor.broke_tools"), **values)


def cost_lines(t: Texts, analysis: doctor.Analysis) -> list[str]:
    """What a varying value early in the prompt or a compaction cost, and the rounds not compared, in words."""
    lines = []
    for f in analysis.findings:
        if f.cause == doctor.VARYING_PREFIX and f.breaks_cache:
            lines.append(t("doctor.varying_prefix", round=f.round, previous=f.compared_with, old=f.old_value,
                           new=f.new_value, shareable=f.shareable_tokens or 0, recomputed=f.recomputed_tokens))
        if f.cause == doctor.HISTORY_COMPACTED:
            lines.append(t("doctor.compacted", round=f.round, previous=f.compared_with, lost=f.lost_tokens or 0,
                           recomputed=f.recomputed_tokens))
        if f.not_compared:
            lines.append(t("doctor.not_compared", round=f.round, why=in_words(f.not_compared, t)))
    lines += [compaction_measured(t)] if any(f.cause == doctor.HISTORY_COMPACTED for f in analysis.findings) else []
    return lines


def verdict(t: Texts, analysis: doctor.Analysis) -> None:
    """The first break and its fix; else why there is none, never "every round extends" when rounds started
    other conversations, switched format or could not be compared; then what the special causes cost."""
    first = analysis.first_break
    if first:
        st.error(cause_text(t, first), icon=":material/heart_broken:")
        st.markdown(f"**{t('doctor.fix')}:** {t(f'fix.{first.cause}')}")
    elif any(f.cause == doctor.SERVER_HISTORY for f in analysis.findings):
        st.info(t("doctor_input.server_history"), icon=":material/cloud:")
    elif analysis.errors:
        st.warning(t("doctor_input.partial", rounds=len(analysis.findings), unread=len(analysis.errors)),
                   icon=":material/warning:")
    elif set(counts := analysis.continuations()) - {doctor.NONE}:
        parts = [t(f"doctor.continuation_{cause}", n=n) for cause, n in sorted(counts.items())]
        key = "doctor.none_compared" if set(counts) == {doctor.NOT_COMPARED} else "doctor.no_break_others"
        st.info(t(key, parts="; ".join(parts)), icon=":material/call_split:")
    else:
        later = [f.recomputed_tokens for f in analysis.findings[1:]] or [analysis.findings[0].recomputed_tokens]
        st.success(t("doctor.clean", median=median(later)), icon=":material/check_circle:")
    for line in cost_lines(t, analysis):
        st.markdown(line)


def show_analysis(t: Texts, name: str, analysis: doctor.Analysis) -> None:
    """One transcript's findings: the first break and its fix, the totals, the chart, the table, each break."""
    findings = [f.to_dict() for f in analysis.findings]
    how = " + ".join(t(f"doctor.how_{'template' if part.startswith('chat template') else 'stable'}")
                     for part in analysis.rendering.split(" and "))  # the core's words, in the visitor's language
    st.caption(t("doctor.rendering", rounds=len(findings), how=how,
                 exact=t("doctor.exact") if analysis.findings[0].tokens_exact else t("doctor.estimated")))
    first = analysis.first_break
    verdict(t, analysis)
    totals = analysis.totals()
    a, b, c, d = st.columns(4)
    a.metric(t("doctor.metric_rounds"), len(findings))
    b.metric(t("doctor.metric_recomputed"), f"{totals['recomputed']:,}")
    c.metric(t("doctor.metric_append"), f"{totals['append_only']:,}")
    d.metric(t("doctor.metric_cacheable"), f"{median(f.cacheable_fraction for f in analysis.findings[1:]) or 0.0:.0%}")
    st.altair_chart(doctor_chart(findings, t), width="stretch", key=f"doctor-chart-{name}")
    table = pd.DataFrame(findings).drop(columns=["old_snippet", "new_snippet"])
    table["cause"] = table["cause"].map(lambda c: t(f"cause.{c}"))
    st.dataframe(table, hide_index=True, key=f"doctor-table-{name}")
    breaking = [f for f in analysis.findings if f.breaks_cache][:10]
    if breaking:
        st.subheader(t("doctor.breaks"))
    for finding in breaking:
        with st.expander(cause_text(t, finding), expanded=finding is first):
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
