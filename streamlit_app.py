"""Prefill Lab: where an LLM request's time goes, and whether prompt caching works for your prompts."""

import streamlit as st

from ui.navigation import PAGES
from ui.sidebar import render_sidebar
from ui.store import visitor
from ui.texts import texts

st.set_page_config(page_title="Prefill Lab", page_icon=":material/timer:", layout="wide")
t = texts()
visitor()  # hosted mode: this visitor's id stays in the URL, so a reload finds their saved runs
page = st.navigation([st.Page(p.path, title=t(p.title), icon=p.icon, default=i == 0)
                      for i, p in enumerate(PAGES)])
render_sidebar()
page.run()
