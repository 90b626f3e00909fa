"""The explainer: the chapter's ideas, with this session's own numbers where it has them."""

import streamlit as st

from core.conclusions import conclusion_of, paragraph
from core.experiments import EXPERIMENTS
from ui.home import TIMELINE_OUTPUT, TIMELINE_PROMPT, prefix_diagram_spec, timeline_spec
from ui.roofline import roof_prediction
from ui.roofline.measure import measure_machine_button
from ui.runs import measured, newest
from ui.text import language, texts

REFERENCE_PREFILL_TPS, REFERENCE_DECODE_TPS = 4900.0, 183.0  # the chapter's Mac Studio run

t = texts()
m = measured()
st.title(t("home.title"))
st.markdown(t.rich("home.intro"), unsafe_allow_html=True)

st.subheader(t("home.your_numbers"))
measure_machine_button(t)
quotes = []
predicted = roof_prediction()  # the roofs' own figures: a measured ratio is quoted as measured, below
if predicted is not None:
    quotes.append(t.rich("home.machine_quote", ratio=predicted.ratio, gain=predicted.gain_bound,
                         can=t("home.can_batch" if predicted.can_show_batching else "home.cannot_batch")))
if m.ratio:
    quotes.append(t.rich("home.ratio_quote", prefill=m.prefill_tps, decode=m.decode_tps, ratio=m.ratio))
for spec in EXPERIMENTS.values():  # each experiment's newest run, in its own conclusion's words
    if (view := newest(spec.id)) is not None:
        said = paragraph(conclusion_of(spec, view.rows, view.state, view.conclusion), t)
        quotes.append(f"**{t(f'{spec.id}.title')}** · {said}")
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


def decode_here() -> None:
    """The decode section's sentence about this machine: the roofs' prediction and the measured ratio, each named."""
    said = [t.rich("home.decode_here_predicted", ratio=predicted.ratio)] if predicted else []
    said += [t.rich("home.decode_here_measured", ratio=m.ratio)] if m.ratio else []
    st.markdown(" ".join(said) or t("home.here_unknown"), unsafe_allow_html=True)


def cost_here() -> None:
    """The price section's sentence about this machine: experiment 4's measured costs, else the roofs' ratio."""
    if m.batch and m.batch.decode_cost_alone and m.batch.decode_cost_batched:
        text = t.rich("home.cost_here_measured", alone=m.batch.decode_cost_alone, batched=m.batch.decode_cost_batched,
                      n=m.batch.last.concurrency)
    else:
        text = t.rich("home.cost_here_predicted", ratio=predicted.ratio) if predicted else t("home.here_unknown")
    st.markdown(text, unsafe_allow_html=True)


# a section's `figure` in content/*.toml names one of these
FIGURES = {"prefix_diagram": draw_prefix_diagram, "decode_here": decode_here, "cost_here": cost_here}

for section in t.raw("home.sections"):
    st.subheader(section["heading"])
    st.markdown(t.colour(section["body"]), unsafe_allow_html=True)
    if "figure" in section:
        FIGURES[section["figure"]]()
