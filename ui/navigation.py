"""The app's pages in navigation order: the explainer, one per registered experiment, the cache doctor,
the saved runs.

Pure data (no Streamlit), so the entry file builds its ``st.navigation`` from it and the page tests
walk the same list. An experiment's page (``app_pages/<id>.py``, so its URL is ``/<id>``), title
(``nav.<id>``) and icon come from `core.experiments.EXPERIMENTS`.
"""

from __future__ import annotations

from typing import NamedTuple

from core.experiments import EXPERIMENTS


class Page(NamedTuple):
    path: str  # the page module, from the repository root; its name is its URL (``/cache``)
    title: str  # its content key
    icon: str


PAGES = [
    Page("app_pages/home.py", "nav.home", ":material/school:"),
    *(Page(spec.page, f"nav.{spec.id}", spec.icon) for spec in EXPERIMENTS.values()),
    Page("app_pages/cache_doctor.py", "nav.doctor", ":material/stethoscope:"),
    Page("app_pages/runs.py", "nav.runs", ":material/database:"),  # saved runs (core.store)
]
