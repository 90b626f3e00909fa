"""The doctor's samples on the page: one button each; the chosen one stays chosen until a file or text is given."""

from __future__ import annotations

import streamlit as st

from core import doctor
from ui.text import Texts

CHOSEN_KEY = "doctor_sample"


def sample_inputs(t: Texts) -> list[tuple[str, bytes]]:
    """The chosen sample as the page's input (its name and bytes), or none: the buttons offer them."""
    st.caption(t("doctor.samples"))
    columns = st.columns(len(doctor.SAMPLES))
    for column, sample in zip(columns, doctor.SAMPLES, strict=True):
        if column.button(t(f"doctor.sample_{sample.name}"), key=f"doctor_sample_{sample.name}"):
            st.session_state[CHOSEN_KEY] = sample.name
    chosen = next((s for s in doctor.SAMPLES if s.name == st.session_state.get(CHOSEN_KEY)), None)
    if chosen is None:
        return []
    st.caption(t("doctor.sample_reading", source=t(f"doctor.sample_{chosen.name}_source")))
    return [chosen.read()]
