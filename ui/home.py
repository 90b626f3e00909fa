"""The explainer's two figures as ready-to-send Vega-Lite specs, built once per language and numbers.

Every new visitor lands on the explainer, so what its figures cost is paid per arrival: building and
validating them in Altair took a third of a new session's CPU, and turning their rows into Arrow on
every visit another fifth (BENCHMARKS.md, "Opening the hosted demo"). Here both happen once: the
datasets are stored as the Arrow bytes ``st.vega_lite_chart`` sends (it passes bytes through as they
are), and ``st.cache_resource`` hands every session the same spec, which Streamlit copies before it
changes anything. Treat a returned spec as read-only.
"""

from __future__ import annotations

from typing import Any

import altair as alt
import pandas as pd
import streamlit as st
from streamlit.dataframe_util import convert_anything_to_arrow_bytes

from core.charts.figures import prefix_diagram, timeline_chart
from ui.text import Texts

TIMELINE_PROMPT, TIMELINE_OUTPUT = 2000, 40  # the request the timeline draws to scale


def _ready(chart: alt.TopLevelMixin) -> dict[str, Any]:
    spec = chart.to_dict()
    spec["datasets"] = {name: convert_anything_to_arrow_bytes(pd.DataFrame(rows))
                        for name, rows in spec.get("datasets", {}).items()}
    return spec


@st.cache_resource(show_spinner=False, max_entries=32)
def timeline_spec(prefill_tps: float, decode_tps: float, lang: str) -> dict[str, Any]:
    return _ready(timeline_chart(TIMELINE_PROMPT, TIMELINE_OUTPUT, prefill_tps, decode_tps, Texts(lang)))


@st.cache_resource(show_spinner=False, max_entries=8)
def prefix_diagram_spec(lang: str) -> dict[str, Any]:
    return _ready(prefix_diagram(Texts(lang)))
