"""Experiment 6's page (AppTest) with its recorded run: the prediction before the run and whether its settings
show the parabola, the same answer both ways, the run's one conclusion, the three charts and the memory with the
chapter's case."""

from __future__ import annotations

from pathlib import Path

import pytest

from core.conclusions import render
from core.experiments import kv_cache as kv
from core.words import ContentWords
from tests.pages.test_roofline import SLOW, cache_roof
from tests.support.apptest import app, chart_values, rendered

pytestmark = pytest.mark.slow


def test_recorded_run_shows_both_ways_against_the_prediction(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    cache_roof(tmp_path, monkeypatch, SLOW)  # this machine's roofs: the page predicts from their bounds
    at = app()
    at.run()
    at.switch_page("app_pages/kv_cache.py").run()
    assert not at.exception, at.exception
    prediction = next(m.value for m in at.markdown if m.value.startswith("**Prediction:**"))
    assert "this machine's roofline bounds" in prediction and "passing 10x from N = " in prediction
    assert "**67%** of it" in prediction and "the parabola shows" in prediction  # the defaults, 32 and 128
    at.button(key="recorded_kv_cache").click().run()
    assert not at.exception and not at.error, (at.exception, [e.value for e in at.error])
    found = kv.summarize(at.session_state["history"][kv.ID][-1].rows)
    assert found is not None and found.same_answer and found.prediction is not None
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["Same answer"] == ContentWords("en")("kv_cache.same_yes", n=found.steps + 1)
    assert metrics["Slower without"] == f"{found.ratio:,.1f}x"
    assert metrics["KV cache held"] == f"{found.kv_bytes / 1e6:,.2f} MB"
    conclusion = kv.conclude(at.session_state["history"][kv.ID][-1].rows, None)
    shown = [s.value for s in at.success] + [i.value for i in at.info]
    assert " ".join(render(conclusion, ContentWords("en"))) in shown  # the page words nothing of its own
    assert f"The same {found.steps + 1} token ids both ways" in " ".join(shown)
    values = chart_values(at)
    ways = {v.get("way") for v in values}
    assert {"with the KV cache", "without: recomputed"} <= ways
    assert {v.get("kind") for v in values if "kind" in v} == {"measured", "predicted"}
    assert any("MB" in v for v in values)  # the memory chart
    text = rendered(at)
    assert "Qwen3.5-2B" in text and "51,000" in text  # the chapter's case, labelled


def test_the_chapters_settings_are_told_they_will_not_show_the_parabola(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch):
    cache_roof(tmp_path, monkeypatch, SLOW)
    at = app(kv_cache_prompt_tokens=200, kv_cache_steps=64)
    at.run()
    at.switch_page("app_pages/kv_cache.py").run()
    prediction = next(m.value for m in at.markdown if m.value.startswith("**Prediction:**"))
    assert "only **14%** of it" in prediction and "inside one" in prediction and "1.23x" in prediction


def test_an_api_backend_is_told_why_not(fake_api):
    from tests.support.apptest import api_state

    at = app(**api_state(fake_api))
    at.run()
    at.switch_page("app_pages/kv_cache.py").run()
    assert not at.exception, at.exception
    assert any("no token ids" in i.value for i in at.info)
