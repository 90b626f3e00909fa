"""Prefill Lab core: backend clients, the local engine, prompt builders and the experiments.

Nothing in this package imports Streamlit, so it serves the app, the CLI (`python -m core`) and
the tests alike.
"""
