"""Streamlit glue shared by the pages: sidebar, run loop, charts. Logic lives in `core`."""
