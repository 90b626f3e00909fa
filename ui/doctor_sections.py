"""The cache doctor page's sections below the findings: measured hits, the breakpoint audit, the bill."""

import pandas as pd
import streamlit as st

from core import doctor
from core.doctor import BILLING_RULES
from ui.content import Texts
from ui.doctor_charts import measured_chart


def measured_section(name: str, findings: list[dict], t: Texts) -> None:
    """The provider's own cache hits (from the usage the log carries) beside the prediction, with a verdict."""
    rows = [f for f in findings if f["measured_cached_tokens"] is not None]
    if not rows:
        return
    st.subheader(t("doctor_input.measured_title"))
    provider = rows[0]["provider"]
    st.caption(t("doctor_input.measured_caption", source=BILLING_RULES[provider].usage_field, provider=provider))
    st.altair_chart(measured_chart(findings, t), width="stretch", key=f"doctor-measured-{name}")
    st.dataframe(pd.DataFrame([{"round": f["round"], "measured": f["measured_cached_tokens"],
                                "predicted": f["predicted_cached_tokens"], "verdict": t(f"verdict.{f['verdict']}")}
                               for f in rows]), hide_index=True, key=f"doctor-measured-table-{name}")


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
    st.caption(t("doctor_input.rule_source", note=base.note, source=base.source, checked=base.checked))
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
    written = sum(r["written_tokens"] for r in bill)
    if written:
        st.caption(t("doctor_input.write_bill", written=written))
