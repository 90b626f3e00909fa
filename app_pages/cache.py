"""Experiment 3: the same long context for several rounds, appended to or broken at the start."""

import hashlib
from collections.abc import Sequence
from dataclasses import replace

import streamlit as st

from core.backends.connect import Connection
from core.charts.base import RunView
from core.charts.cache import cache_token_chart, cache_ttft_chart
from core.documents import FittedDocument, default_document
from core.experiments import EXPERIMENTS
from core.experiments import prefix_cache as ex
from core.experiments.prompts import STRATEGIES
from core.experiments.samples import chapter_reference
from core.records import RoundResult
from ui.runs import ExperimentPlan, explain, preview, run_controls, show_run, uploaded
from ui.session import BACKEND_KEY
from ui.text import Texts, texts

t = texts()
st.title(t("cache.title"))
st.markdown(t.rich("cache.idea"), unsafe_allow_html=True)

if st.session_state.get(BACKEND_KEY) == "anthropic":  # caching there is explicit, and writes cost extra
    with st.expander(t("anthropic.title"), expanded=True):
        for part in ("explain", "pricing", "expect", "minimum", "usage"):
            st.markdown(t(f"anthropic.{part}"))

with st.expander(t("common.settings"), expanded=True):
    left, right = st.columns(2)
    rounds = left.number_input(t("cache.rounds"), 1, 30, key="cache_rounds")
    doc_tokens = left.number_input(t("cache.doc_tokens"), 100, 200_000, step=500, key="cache_doc_tokens")
    strategies = right.multiselect(t("cache.strategies"), list(STRATEGIES), placeholder=t("common.choose"),
                                   key="cache_strategies", format_func=lambda s: t(f"strategy.{s}"))
    upload = st.file_uploader(t("cache.upload"), type=None, key="cache_upload", help=t("cache.upload_help"))

document, doc_name = uploaded(t, "cache", upload, default_document(), ex.DEFAULT_DOC)

doc_id = hashlib.sha256(document.encode()).hexdigest()[:12]
settings = ex.Settings(int(rounds), tuple(strategies), doc_name, int(doc_tokens), document)
prepared = preview(EXPERIMENTS[ex.ID], settings, f"{doc_id}-{doc_tokens}-{rounds}-{','.join(strategies)}")
fitted: FittedDocument | None = None
if isinstance(prepared, str):
    st.error(f"{t('common.backend_error')} {prepared}")
else:
    fitted = prepared.fitted
    approx = "" if fitted.exact else "~"
    st.caption(t("cache.doc_cut" if fitted.truncated else "cache.doc_whole", tokens=f"{approx}{fitted.tokens:,}",
                 original=f"{approx}{fitted.original_tokens:,}"))


def check(settings: ex.Settings, conn: Connection) -> None:
    """The document fitted above, for this backend, goes out as it is."""
    if fitted is None:
        raise ValueError(t("cache.not_fitted"))


def draw(runs: Sequence[RunView[RoundResult]], t: Texts, key: str) -> None:
    rows = runs[0].rows
    by_strategy = ex.summarize_cache(rows)
    ratios = ex.recomputed_ratio(by_strategy)
    metrics = [(f"{t('cache.metric_recomputed')} · {t(f'strategy.{s.strategy}')}",
                f"{s.recomputed_total:,}" if s.recomputed_total is not None else "–") for s in by_strategy.values()]
    metrics += [
        (t("cache.metric_ratio", name=t(f"strategy.{name}")), f"{ratio:.1f}×") for name, ratio in ratios.items()
    ]
    for row in range(2):  # a fixed grid (4 strategies + 3 ratios at most), so the layout never shifts
        for column, (label, value) in zip(st.columns(4), metrics[row * 4 : row * 4 + 4], strict=False):
            column.metric(label, value)
    st.markdown(f"**{t.rich('cache.chart_tokens')}**", unsafe_allow_html=True)
    tokens, tokens_slot = cache_token_chart(runs, t), st.empty()
    if tokens is not None:
        tokens_slot.altair_chart(tokens, key=f"cache-tokens-{key}")
    elif any(not r.error for r in rows):  # measured rounds, but the backend reports no token counts
        tokens_slot.info(t("cache.no_counts"))
    ttft, ttft_slot = cache_ttft_chart(runs, t), st.empty()
    if ttft is not None:
        ttft_slot.altair_chart(ttft, width="stretch", key=f"cache-ttft-{key}")
    explain(t, "cache", runs[0])


settings = replace(settings, fitted=fitted)
plan = ExperimentPlan.of(EXPERIMENTS[ex.ID], settings, check, doc_sha256=doc_id)
show_run(run_controls(plan), draw, ex.ID)

reference = chapter_reference()
with st.expander(t("cache.reference")):
    st.dataframe(reference["rows"], hide_index=True)
    totals = reference["totals"]
    st.caption(
        t(
            "cache.reference_totals",
            append=totals["append_only_recomputed"],
            stamp=totals["timestamp_first_recomputed"],
            rounds=totals["rounds"],
            ratio=totals["timestamp_first_recomputed"] / totals["append_only_recomputed"],
        )
    )
