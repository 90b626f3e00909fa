"""The cache doctor page's sections below the findings: measured hits, the provider's own diagnosis, what the
payload cannot show, the timeline of the rounds, the breakpoint audit, the bill."""

import pandas as pd
import streamlit as st

from core import doctor
from core.charts.doctor import measured_chart, timeline_chart
from core.doctor import BILLING_RULES
from core.doctor.diagnostics import DIAGNOSTICS
from core.words import in_words
from ui.text import Texts


def measured_section(name: str, findings: list[dict], t: Texts) -> None:
    """The provider's own cache hits (from the usage the log carries) beside the prediction, with a verdict."""
    rows = [f for f in findings if f["measured_cached_tokens"] is not None]
    if not rows:
        return
    st.subheader(t("doctor_input.measured_title"))
    provider = rows[0]["provider"]
    st.caption(t("doctor_input.measured_caption", source=BILLING_RULES[provider].usage_field or "usage",
                 provider=provider))
    st.altair_chart(measured_chart(findings, t), width="stretch", key=f"doctor-measured-{name}")
    st.dataframe(pd.DataFrame([{"round": f["round"], "measured": f["measured_cached_tokens"],
                                "predicted": f["predicted_cached_tokens"], "verdict": t(f"verdict.{f['verdict']}")}
                               for f in rows]), hide_index=True, key=f"doctor-measured-table-{name}")


def unexplained_section(rows: list[dict], t: Texts) -> None:
    """Rounds whose prefix was intact but the provider read less: what the payload cannot show."""
    missed = [f for f in rows if f["unexplained"]]
    if not missed:
        return
    st.subheader(t("doctor_input.unexplained_title"))
    for f in missed:
        reasons = "; ".join(t(f"unexplained.{r}") for r in f["unexplained"])
        if f["provider_side"]:  # said as the provider's side, with the evidence, so nobody searches the prompt
            st.warning(t("doctor_input.provider_side", round=f["round"], provider=f["provider"],
                         kept=f["common_prefix_tokens"], previous=f["compared_with"], prompt=f["prompt_tokens"],
                         minimum=f["minimum_tokens"] or 0, measured=f["measured_cached_tokens"],
                         predicted=f["predicted_cached_tokens"], reasons=reasons), icon=":material/cloud_off:")
            continue
        st.warning(t("doctor_input.unexplained", round=f["round"], provider=f["provider"],
                     measured=f["measured_cached_tokens"], predicted=f["predicted_cached_tokens"], reasons=reasons),
                   icon=":material/help:")


def diagnosis_section(name: str, rows: list[dict], t: Texts) -> None:
    """The provider's cache diagnostics, where the responses carry them, beside the doctor's cause."""
    diagnosed = [f for f in rows if f["provider_reason"] is not None]
    if not diagnosed:
        return
    st.subheader(t("diagnosis.title"))
    st.caption(t("diagnosis.caption", source=", ".join(f"{d['field']}: {d['source']}" for d in DIAGNOSTICS.values())))
    for f in diagnosed:
        if f["diagnosis_agrees"] is False:
            st.error(t("diagnosis.disagree", round=f["round"], reason=f["provider_reason"],
                       section=f["provider_section"], cause=t(f"cause.{f['cause']}")), icon=":material/compare_arrows:")
    match = {True: t("diagnosis.agree"), False: t("diagnosis.differs"), None: t("diagnosis.nothing")}
    st.dataframe(pd.DataFrame([{t("diagnosis.round"): f["round"], t("diagnosis.provider"): f["provider_reason"],
                                t("diagnosis.section"): f["provider_section"],
                                t("diagnosis.missed"): f["provider_missed_tokens"],
                                t("diagnosis.doctor"): t(f"cause.{f['cause']}"),
                                t("diagnosis.match"): match[f["diagnosis_agrees"]]} for f in diagnosed]),
                 hide_index=True, key=f"doctor-diagnosis-{name}")


def timeline_section(name: str, rows: list[dict], t: Texts) -> None:
    """The gaps between the rounds against the provider's cache lifetime, where the log has timestamps."""
    if not any(f["gap_seconds"] is not None for f in rows):
        return
    lifetimes = sorted({f["lifetime_seconds"] for f in rows if f["lifetime_seconds"]})
    st.caption(t("timeline.caption", lifetime=", ".join(f"{s:,} s" for s in lifetimes) or "-"))
    st.altair_chart(timeline_chart(rows, t), width="stretch", key=f"doctor-timeline-{name}")


def audit_section(name: str, analysis: doctor.Analysis, t: Texts) -> None:
    """Each Anthropic cache_control and what keeps it from paying off."""
    items = doctor.audit(analysis)
    if not items:
        return
    st.subheader(t("doctor_input.audit_title"))
    st.caption(t("doctor_input.audit_caption"))
    if not any(item.issues for item in items):
        st.success(t("doctor_input.audit_clean"))
    st.dataframe(pd.DataFrame([{**item.to_dict(), "issues": "; ".join(t(f"audit.{i}") for i in item.issues)}
                               for item in items]), hide_index=True, key=f"doctor-audit-{name}")


@st.fragment
def billing_section(name: str, analysis: doctor.Analysis, t: Texts) -> None:
    """Its own fragment: editing a price reruns this section only, not the analysis above."""
    st.subheader(t("doctor.provider"))
    names = list(BILLING_RULES)
    usual = max(names, key=[f.provider for f in analysis.findings].count)
    rule_name = st.selectbox(t("doctor.provider_rule"), names, index=names.index(usual), key=f"doctor_rule_{name}")
    base = BILLING_RULES[rule_name]
    st.caption(t("doctor_input.rule_source", note=in_words(base.described(), t), source=base.source,
                 checked=base.checked))
    edited = st.data_editor(
        pd.DataFrame([{"minimum": base.minimum, "step": base.step, "input_per_million": base.input_per_million,
                       "cached_per_million": base.cached_per_million}]),
        hide_index=True, key=f"doctor_prices_{name}_{rule_name}", num_rows="fixed")
    row = edited.iloc[0]
    rule = base.edited(minimum=int(row["minimum"]), step=max(int(row["step"]), 1),
                       input_per_million=float(row["input_per_million"]),
                       cached_per_million=float(row["cached_per_million"]))
    bill = doctor.billing(analysis, rule)
    st.caption(t("doctor.prices"))
    st.info(t("doctor.bill", cached=sum(r["cached_tokens"] for r in bill), prompt=sum(r["prompt_tokens"] for r in bill),
              cost=sum(r["cost"] for r in bill), ideal_cached=sum(r["append_only_cached_tokens"] for r in bill),
              ideal=sum(r["append_only_cost"] for r in bill)))
    measured = [(f.measured_cached_tokens, row["cached_tokens"]) for f, row in zip(analysis.findings, bill, strict=True)
                if f.measured_cached_tokens is not None]
    if measured:  # the provider's own count beside the simulation, never one for the other
        st.caption(t("doctor.bill_measured", measured=sum(m for m, _ in measured), rounds=len(measured),
                     simulated=sum(s for _, s in measured)))
    written = sum(r["written_tokens"] for r in bill)
    if written:
        st.caption(t("doctor_input.write_bill", written=written))
