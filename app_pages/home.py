"""The explainer: the chapter's ideas, with this session's own numbers where it has them."""

import streamlit as st

from core.experiments import batch
from core.experiments.batch import BatchLevel, batch_verdict
from ui.home import TIMELINE_OUTPUT, TIMELINE_PROMPT, prefix_diagram_spec, timeline_spec
from ui.roofline import backend_prediction
from ui.roofline.measure import measure_machine_button
from ui.runs import measured, rows_of
from ui.text import language, texts

REFERENCE_PREFILL_TPS, REFERENCE_DECODE_TPS = 4900.0, 183.0  # the chapter's Mac Studio run

t = texts()
m = measured()
st.title(t("home.title"))
st.markdown(t.rich("home.intro"), unsafe_allow_html=True)

st.subheader(t("home.your_numbers"))
measure_machine_button(t)
quotes = []
prediction = backend_prediction()
if prediction is not None:
    quotes.append(t.rich("home.machine_quote", ratio=prediction.ratio, gain=prediction.gain_bound,
                         can=t("home.can_batch" if prediction.can_show_batching else "home.cannot_batch")))
if m.ratio:
    quotes.append(t.rich("home.ratio_quote", prefill=m.prefill_tps, decode=m.decode_tps, ratio=m.ratio))
else:
    if m.prefill_tps:
        quotes.append(t.rich("home.prefill_quote", prefill=m.prefill_tps))
    if m.decode_tps:
        quotes.append(t.rich("home.decode_quote", decode=m.decode_tps, ms=m.ms_per_output_token))
append, others = m.cache.get("append_only"), [s for n, s in m.cache.items() if n != "append_only"]
if append and others and append.recomputed_after_first is not None and others[0].recomputed_after_first is not None:
    quotes.append(
        t.rich(
            "home.cache_quote",
            append=append.recomputed_after_first,
            breaker=others[0].recomputed_after_first,
            other=t(f"strategy.{others[0].strategy}"),
        )
    )
batch_shown, batch_values = batch_verdict(rows_of(batch.ID, BatchLevel))
if batch_shown is not None:  # experiment 4 quoted only as far as it showed batching (its own verdict)
    quotes.append(t.rich("batch.home_quote" if batch_shown else "batch.home_quote_short", **batch_values))
st.markdown("\n\n".join(quotes) if quotes else t("home.no_numbers"), unsafe_allow_html=True)

st.subheader(t("home.timeline_title"))
# one machine's numbers, never a mix: this session's prefill and decode once both are measured, else the chapter's
mine = bool(m.prefill_tps and m.decode_tps)
prefill_tps = m.prefill_tps if mine and m.prefill_tps else REFERENCE_PREFILL_TPS
decode_tps = m.decode_tps if mine and m.decode_tps else REFERENCE_DECODE_TPS
source = t("home.source_measured") if mine else t("home.source_reference")
st.vega_lite_chart(timeline_spec(prefill_tps, decode_tps, language()), width="stretch")
st.caption(t("home.timeline_caption", prompt=TIMELINE_PROMPT, output=TIMELINE_OUTPUT, prefill=prefill_tps,
             decode=decode_tps, source=source))


def draw_prefix_diagram() -> None:
    st.markdown(f"**{t('home.cache_title')}**")
    st.vega_lite_chart(prefix_diagram_spec(language()), width="stretch")
    st.caption(t("home.cache_caption"))


FIGURES = {"prefix_diagram": draw_prefix_diagram}  # a section's `figure` in content/*.toml names one of these

for section in t.raw("home.sections"):
    st.subheader(section["heading"])
    st.markdown(t.colour(section["body"]), unsafe_allow_html=True)
    if "figure" in section:
        FIGURES[section["figure"]]()
