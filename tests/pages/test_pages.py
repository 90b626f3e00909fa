"""Every page through AppTest without any llama-server (the fake API is the backend), in both languages;
and what the pages of experiments 1 and 2 draw for repeated points."""

from __future__ import annotations

import pytest

from core.words import load
from tests.support.apptest import api_state, app, chart_values
from ui.navigation import PAGES


@pytest.mark.parametrize("page", PAGES, ids=[page.path for page in PAGES])
def test_every_page_renders_in_both_languages(fake_api, page):
    for lang in ("en", "zh"):
        at = app(**api_state(fake_api), lang=lang).switch_page(page.path).run()
        assert not at.exception, (lang, at.exception)
        assert not at.error, (lang, [e.value for e in at.error])
        name = page.title.split(".")[-1]  # nav.cache: the page's own words are in [cache]
        assert [t.value for t in at.title] == [load(lang)[name]["title"]], lang
        # Streamlit's own "Choose options" stood on the Chinese pages: each box says it in the visitor's language
        assert all(box.proto.placeholder == load(lang)["common"]["choose"] for box in at.multiselect), lang
    assert fake_api.requests == [], "rendering a page sends nothing"


@pytest.mark.slow
@pytest.mark.parametrize(("page", "state", "columns"), [
    ("app_pages/input.py", {"input_sizes": [128, 256], "input_repeats": 3}, ["ttft_ms"]),
    ("app_pages/output.py", {"output_lengths": [8, 16], "output_repeats": 3},
     ["total_ms", "ms_per_output_token"]),
])
def test_experiments_1_and_2_with_repeats_show_p50_and_p90(fake_api, page, state, columns):
    at = app(**api_state(fake_api), **state)
    at.run()
    at.switch_page(page).run()
    at.button(key=f"run_{'input' if 'input' in page else 'output'}").click().run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    rounds = at.dataframe[0].value
    spread = [r for r in chart_values(at) if "p90" in r and r.get("n") == 3]
    assert len(spread) == 2 * len(columns), "one p50/p90 mark per point and chart with repeats"
    measured = {value for column in columns for value in rounds[column]}
    for mark in spread:
        assert mark["low"] <= mark["p50"] <= mark["p90"]
        assert {mark["p50"], mark["p90"]} <= measured, "percentiles are measured values (nearest rank)"




def test_the_same_answer_metric_fits_its_column_in_both_languages():
    """A metric's value is cut at its column's width (it showed "是：65 …"): a few characters, the ids in its help."""
    for lang in ("en", "zh"):
        words = load(lang)["kv_cache"]
        assert len(words["same_yes"].format(n=129)) <= 9 and "{n}" in words["same_help"], lang
