"""Helpers for driving the real app with Streamlit's AppTest (imported by the app test modules)."""

from __future__ import annotations

from pathlib import Path

from streamlit.dataframe_util import convert_arrow_bytes_to_pandas_df
from streamlit.testing.v1 import AppTest

from ui.navigation import PAGES as NAVIGATION

ROOT = Path(__file__).resolve().parents[2]
KEY = "sk-apptest-secret-0123456789"
PAGES = [page.path for page in NAVIGATION]  # every page, in the navigation's order


def app(**state) -> AppTest:
    """The whole app (entry file, navigation, sidebar) with ``state`` preset in the session."""
    at = AppTest.from_file(str(ROOT / "streamlit_app.py"), default_timeout=120)
    for key, value in state.items():
        at.session_state[key] = value
    return at


def api_state(fake_api, model: str = "ok") -> dict:
    """Session state that points the sidebar at the fake OpenAI-compatible server with a typed key."""
    return {"backend": "api", "preset": "vLLM", "base_url": fake_api.base_url, "model": model, "session_api_key": KEY}


def rendered(at: AppTest) -> str:
    """Every protobuf message the script sent to the browser, as text (sidebar included)."""
    parts: list[str] = []

    def walk(node) -> None:
        if getattr(node, "proto", None) is not None:
            parts.append(str(node.proto))
        children = getattr(node, "children", None) or {}
        for child in (children.values() if isinstance(children, dict) else children):
            walk(child)

    walk(at._tree)
    return "\n".join(parts)


def chart_values(at: AppTest) -> list[dict]:
    """Every data row of every Altair chart on the page (Streamlit sends them as Arrow)."""
    values = []
    for chart in at.get("vega_lite_chart"):
        for dataset in chart.proto.datasets:
            values.extend(convert_arrow_bytes_to_pandas_df(dataset.data.data).to_dict("records"))
    return values
