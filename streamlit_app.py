"""Prefill Lab: where an LLM request's time goes, and whether prompt caching works for your prompts.

Nothing here makes the browser call another host: the tab's icon is an emoji (drawn as an inline
SVG; a ``:material/...:`` page icon would be fetched from Google's font host), and the pages' Material
icons come from the font Streamlit serves itself. A fault in a page reaches the visitor as one
sentence and the operator's log as a traceback (`.streamlit/config.toml` hides Streamlit's own
error details too).
"""

import logging

import streamlit as st

from ui.navigation import PAGES
from ui.runs import hosted_visitor
from ui.sidebar import render_sidebar
from ui.text import texts

st.set_page_config(page_title="Prefill Lab", page_icon="⏱️", layout="wide")
t = texts()
hosted_visitor()  # hosted mode: this visitor's id stays in the URL, so a reload finds their saved runs
page = st.navigation([st.Page(p.path, title=t(p.title), icon=p.icon, default=i == 0)
                      for i, p in enumerate(PAGES)])
try:
    render_sidebar()
    page.run()
except Exception:  # noqa: BLE001 - Streamlit's rerun and stop derive from BaseException and pass through
    logging.getLogger("prefill_lab.app").exception("Uncaught error on page %s", page.url_path or "home")
    st.error(texts()("common.unexpected"), icon=":material/error:")
