"""Experiment 3's document fitted to the current backend once, and reused until something changes."""

from __future__ import annotations

import httpx
import streamlit as st

from core.documents import FittedDocument, fit_document
from core.engine.server import EngineError
from core.experiments.prefix_cache import cache_doc_budget
from ui.sidebar.target import connect, current_target


def fit_for_backend(document: str, doc_id: str, budget: int, rounds: int) -> FittedDocument | str:
    """The document cut to ``budget`` tokens of the current backend, leaving room in its context for
    ``rounds`` rounds (cached per session), or why it cannot be."""
    cache = st.session_state.setdefault("fitted_documents", {})
    try:
        target = current_target()
        key = (doc_id, budget, rounds, target.backend, target.url)
        if key not in cache:
            with connect(target) as conn:
                cache[key] = fit_document(document, cache_doc_budget(budget, conn.context, rounds), conn.counter)
    except (EngineError, httpx.HTTPError, ValueError, KeyError) as exc:
        return f"{type(exc).__name__}: {exc}"
    return cache[key]
