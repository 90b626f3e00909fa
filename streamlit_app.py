"""Prefill Lab: where an LLM request's time goes, and whether prompt caching works for your prompts."""

import streamlit as st

from ui.sidebar import render_sidebar
from ui.texts import texts

st.set_page_config(page_title="Prefill Lab", page_icon=":material/timer:", layout="wide")
t = texts()
page = st.navigation([
    st.Page("app_pages/home.py", title=t("nav.home"), icon=":material/school:", default=True),
    st.Page("app_pages/input_length.py", title=t("nav.input"), icon=":material/input:"),
    st.Page("app_pages/output_length.py", title=t("nav.output"), icon=":material/output:"),
    st.Page("app_pages/prefix_cache.py", title=t("nav.cache"), icon=":material/cached:"),
    st.Page("app_pages/batching.py", title=t("batch.nav"), icon=":material/stacks:"),
    st.Page("app_pages/roofline.py", title=t("roofline.nav"), icon=":material/roofing:"),
    st.Page("app_pages/cache_doctor.py", title=t("doctor.nav"), icon=":material/stethoscope:"),
])
render_sidebar()
page.run()
