"""Experiment 8's page (AppTest) with its recorded run (samples/embedded_arrivals.json, a real run on the embedded
default): the metrics, the four charts with the capacity marked and every part of the split, the conclusion in the
reader's language; the reader's goodput targets redraw it without a run; an API is told the cost first."""

from __future__ import annotations

import pytest

from core.conclusions import render
from core.experiments import arrivals as ar
from core.words import ContentWords
from tests.support.apptest import api_state, app, chart_values

pytestmark = pytest.mark.slow


def test_recorded_run_shows_the_split_the_capacity_and_the_conclusion():
    at = app()
    at.run()
    at.switch_page("app_pages/arrivals.py").run()
    assert not at.exception, at.exception
    at.button(key="recorded_arrivals").click().run()
    assert not at.exception and not at.error, (at.exception, [e.value for e in at.error])
    rows = at.session_state["history"][ar.ID][-1].rows
    found = ar.summarize(rows)
    assert found is not None and found.capacity and len(found.levels) == len(ar.Settings().rates)
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["Capacity"] == f"{found.capacity:.2f}/s"
    top = found.levels[-1]  # its cut requests count with what they waited: a lower bound, marked so
    assert metrics["TTFT p50, highest rate"] == ("≥ " if top.cut else "") + f"{top.ttft_p50_ms:,.0f} ms"
    values = chart_values(at)
    assert {v["part"] for v in values if "part" in v} == {"client delay", "network", "queue", "prefill", "rest"}
    assert {v["percentile"] for v in values if "percentile" in v} == {"p50", "p90", "p99"}
    assert any(v.get("label") == f"capacity {found.capacity:.2f}/s" for v in values)
    assert any("scheduled" in v for v in values) and any("share" in v for v in values)
    sentence = " ".join(render(ar.conclude(rows, None), ContentWords("en")))
    assert sentence in [s.value for s in at.success] + [i.value for i in at.info]

    before = [v["good"] for v in values if "good" in v]
    at.number_input(key="arrivals_ttft_target_ms").set_value(60_000.0).run()
    at.number_input(key="arrivals_itl_target_ms").set_value(5_000.0).run()
    after = [v["good"] for v in chart_values(at) if "good" in v]
    assert after == [lv.completed for lv in found.levels] and sum(after) >= sum(before)  # every finished one met them


def test_an_api_is_offered_low_rates_and_told_the_cost_first(fake_api):
    at = app(**api_state(fake_api))
    at.run()
    at.switch_page("app_pages/arrivals.py").run()
    assert not at.exception, at.exception
    assert set(at.multiselect(key="arrivals_rates").options) == {"0.1", "0.25", "0.5", "1.0"}
    plan = ar.plan(ar.Settings(rates=(0.25, 0.5, 1.0)))
    assert any(f"{plan.requests:,} requests" in i.value and "$" in i.value for i in at.info)
    assert fake_api.requests == []


def test_a_hosted_demo_caps_the_rate_and_the_open_streams_on_its_key(fake_api):
    """Hosted: the page offers only the demo's rates, says the cap, and the run it starts carries it (``max_open``),
    so its admission lets it in; the stranger's run never opens more than the demo's streams at once."""
    at = app()
    for name, value in {"PREFILL_LAB_HOSTED": "true", "PREFILL_LAB_ALLOWED_BASE_URLS": fake_api.base_url,
                        "PREFILL_LAB_ALLOW_LOOPBACK": "true", "PREFILL_LAB_MAX_CONCURRENCY": "1",
                        "PREFILL_LAB_MAX_RATE": "0.25", "OPENAI_API_KEY": "sk-operator-0123456789"}.items():
        at.secrets[name] = value
    at.session_state["model"] = "ok"
    at.run()
    at.switch_page("app_pages/arrivals.py").run()
    assert not at.exception, at.exception
    assert set(at.multiselect(key="arrivals_rates").options) == {"0.1", "0.25"}
    assert any("at most 1 of its requests open at once" in c.value for c in at.caption)
    at.multiselect(key="arrivals_rates").set_value([0.1]).run()
    at.select_slider(key="arrivals_duration_s").set_value(5.0).run()
    at.button(key="run_arrivals").click().run()
    assert not at.error, [e.value for e in at.error]
    run = at.session_state["history"][ar.ID][-1]
    assert run.settings["max_open"] == 1 and run.settings["rates"] == [0.1]
    run.join(120)  # its arrivals, on the demo's key
    arrivals = len(ar.schedule(0.1, 5.0, ar.Settings().seed))
    assert [(level.requests, level.completed) for level in run.rows] == [(arrivals, arrivals)], run.error
