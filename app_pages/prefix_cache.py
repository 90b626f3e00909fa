"""Experiment 3: the same long context for several rounds, appended to or broken at the start."""

import hashlib

import streamlit as st

from core import experiments as ex
from core.prompts import STRATEGIES, DocumentError, default_document, fit_document, read_document
from core.samples import chapter_reference
from core.verdicts import cache_verdict
from ui.backend import fit_for_backend, hosted, texts
from ui.charts import cache_token_chart, cache_ttft_chart
from ui.experiment import explain, run_controls, show_run

t = texts()
st.title(t("cache.title"))
st.markdown(t.rich("cache.idea"), unsafe_allow_html=True)

with st.expander(t("common.settings"), expanded=True):
    left, right = st.columns(2)
    rounds = left.number_input(t("cache.rounds"), 1, 30, key="cache_rounds")
    doc_tokens = left.number_input(t("cache.doc_tokens"), 100, 200_000, step=500, key="cache_doc_tokens")
    strategies = right.multiselect(t("cache.strategies"), list(STRATEGIES), key="cache_strategies",
                                   format_func=lambda s: t(f"strategy.{s}"))
    upload = st.file_uploader(t("cache.upload"), type=None, key="cache_upload", help=t("cache.upload_help"))

document, doc_name = default_document(), "default"
if upload is not None:
    try:
        document, doc_name = read_document(upload.getvalue(), upload.name, hosted().max_doc_bytes), upload.name
        st.caption(t("cache.doc_uploaded", name=upload.name))
    except DocumentError as exc:
        st.error(t("cache.doc_error", error=exc), icon=":material/warning:")
else:
    st.caption(t("cache.doc_default"))


doc_id = hashlib.sha256(document.encode()).hexdigest()[:12]
fitted = fit_for_backend(document, doc_id, int(doc_tokens), int(rounds))
if isinstance(fitted, str):
    st.error(f"{t('common.backend_error')} {fitted}")
    fitted = None
else:
    approx = "" if fitted.exact else "~"
    st.caption(t("cache.doc_cut" if fitted.truncated else "cache.doc_whole", tokens=f"{approx}{fitted.tokens:,}",
                 original=f"{approx}{fitted.original_tokens:,}"))


def make_source(conn):
    doc = fitted or fit_document(document, ex.cache_doc_budget(int(doc_tokens), conn.context, rounds), conn.counter)
    return lambda cancel, progress: ex.prefix_cache_rounds(conn.backend, doc.text, conn.counter, strategies, rounds,
                                                           doc.tokens, cancel=cancel, on_progress=progress)


def draw(runs, t, key):
    rows = runs[0][1]
    summaries = ex.summarize_cache(rows)
    ratios = ex.recomputed_ratio(summaries)
    metrics = [(f"{t('cache.metric_recomputed')} · {t(f'strategy.{s.strategy}')}",
                f"{s.recomputed_total:,}" if s.recomputed_total is not None else "–") for s in summaries.values()]
    metrics += [(t("cache.metric_ratio", name=t(f"strategy.{name}")), f"{ratio:.1f}×") for name, ratio in ratios.items()]
    for row in range(2):  # a fixed grid (4 strategies + 3 ratios at most), so the layout never shifts
        for column, (label, value) in zip(st.columns(4), metrics[row * 4:row * 4 + 4]):
            column.metric(label, value)
    st.markdown(f"**{t.rich('cache.chart_tokens')}**", unsafe_allow_html=True)
    tokens, tokens_slot = cache_token_chart(runs, t), st.empty()
    if tokens is not None:
        tokens_slot.altair_chart(tokens, key=f"cache-tokens-{key}")
    elif rows:
        tokens_slot.info(t("cache.no_counts"))
    ttft, ttft_slot = cache_ttft_chart(runs, t), st.empty()
    if ttft is not None:
        ttft_slot.altair_chart(ttft, width="stretch", key=f"cache-ttft-{key}")
    shown, values = cache_verdict(rows)
    if values:
        values = {**values, "other": t(f"strategy.{values['other']}")}
        verdict = t("cache.shown" if values["by"] == "tokens" else "cache.shown_time", **values)
    else:
        verdict = t("cache.not_shown")
    explain(t, "cache", shown, verdict)


settings = {"rounds": rounds, "strategies": strategies, "doc": doc_name, "doc_sha256": doc_id, "doc_tokens": doc_tokens}
planned_tokens = rounds * len(strategies) * (int(doc_tokens) + 40 * rounds)
run = run_controls(ex.CACHE, settings, make_source, rounds * len(strategies), planned_tokens)
show_run(run, draw, ex.CACHE)

reference = chapter_reference()
with st.expander(t("cache.reference")):
    st.dataframe(reference["rows"], hide_index=True)
    totals = reference["totals"]
    st.caption(t("cache.reference_totals", append=totals["append_only_recomputed"], stamp=totals["timestamp_first_recomputed"],
                 rounds=totals["rounds"], ratio=totals["timestamp_first_recomputed"] / totals["append_only_recomputed"]))
