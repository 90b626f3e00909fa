"""The Streamlit app through AppTest: every page in both languages, and experiment 3 end to end."""

from __future__ import annotations

import pytest
from streamlit.testing.v1 import AppTest

from core.export import to_csv, to_json
from tests.support.apptest import KEY, PAGES, api_state, app, chart_values, rendered


@pytest.mark.llama
@pytest.mark.parametrize("lang", ["en", "zh"])
def test_every_page_renders_on_the_embedded_server(lang):
    at = app(lang=lang)
    at.run()
    assert not at.exception
    for page in PAGES:
        at.switch_page(page).run()
        assert not at.exception, (page, at.exception)
        assert not at.error, (page, [e.value for e in at.error])
        assert at.title, page
    at.switch_page("app_pages/home.py").run()
    heading = at.title[0].value
    assert (heading == "一次请求的时间都去哪了？") == (lang == "zh")
    assert any("Healthy" in s.value or "运行正常" in s.value for s in at.sidebar.success)


def _run_cache(at: AppTest, rounds: int = 3) -> AppTest:
    at.switch_page("app_pages/cache.py").run()
    at.number_input(key="cache_rounds").set_value(rounds).run()
    at.button(key="run_cache").click().run()
    return at


@pytest.mark.slow
def test_prefix_cache_page_shows_scripted_rounds(fake_api):
    # warm-up, then append only 3 rounds, then timestamp first 3 rounds
    fake_api.cached_script = [0, 0, 900, 950, 0, 3, 3]
    at = _run_cache(app(**api_state(fake_api)))
    assert not at.exception and not at.error, [e.value for e in at.error]
    table = at.dataframe[0].value
    assert list(table["cached_tokens"]) == [0, 900, 950, 0, 3, 3]
    assert list(table["strategy"]) == ["append_only"] * 3 + ["timestamp_first"] * 3
    reused_in_chart = sorted(v["tokens"] for v in chart_values(at) if v.get("kind") == "reused" and "tokens" in v)
    assert reused_in_chart == sorted([0, 900, 950, 0, 3, 3])
    assert any("Done: 6 rounds" in s.value for s in at.success)
    assert [b.label for b in at.get("download_button")] == ["Download CSV", "Download JSON", "Download HTML report"]


@pytest.mark.slow
def test_anthropic_backend_from_the_sidebar_reads_and_writes_the_cache(fake_api):
    at = app(backend="anthropic", preset="Anthropic", base_url=fake_api.base_url, model="claude-test",
             session_api_key=KEY)
    at.run()
    assert at.sidebar.selectbox(key="preset").options == ["Anthropic"]
    at = _run_cache(at, rounds=2)
    assert not at.exception and not at.error, [e.value for e in at.error]
    assert any("cache_control" in m.value for m in at.markdown)  # the page explains explicit caching
    assert all(r["path"] == "/v1/messages" and r["headers"]["x-api-key"] == KEY for r in fake_api.requests)
    table = at.dataframe[0].value
    append, stamp = table[table["strategy"] == "append_only"], table[table["strategy"] == "timestamp_first"]
    assert append["cached_tokens"].iloc[1] > 0.9 * append["prompt_tokens"].iloc[1]
    assert (stamp["cached_tokens"] == 0).all() and (stamp["cache_write_tokens"] > 0).all()
    assert KEY not in rendered(at)


@pytest.mark.slow
def test_upload_replaces_the_document_and_bad_upload_is_refused(fake_api):
    at = app(**api_state(fake_api))
    at.switch_page("app_pages/cache.py").run()
    at.file_uploader(key="cache_upload").upload(
        "agent_prompt.txt", "MY AGENT PROMPT. ".encode() * 50, "text/plain"
    ).run()
    assert any("agent_prompt.txt" in c.value for c in at.caption)
    assert any("used whole" in c.value for c in at.caption)
    at.number_input(key="cache_rounds").set_value(1).run()
    at.button(key="run_cache").click().run()
    system = fake_api.requests[-1]["body"]["messages"][0]["content"]
    assert "MY AGENT PROMPT." in system and "assert" not in system

    at.file_uploader(key="cache_upload").upload("photo.png", b"\x89PNG\x00\x00\x01binary", "image/png").run()
    assert any("binary" in e.value for e in at.error)
    assert not at.exception


@pytest.mark.slow
def test_failing_backend_keeps_completed_rounds(fake_api):
    fake_api.cached_script = [0, 0]
    at = app(**api_state(fake_api))
    at.switch_page("app_pages/output.py").run()
    at.multiselect(key="output_lengths").set_value([8, 16, 32]).run()
    # the server starts answering 500 after the warm-up and the first round
    original = fake_api.RequestHandlerClass.do_POST
    calls = {"n": 0}

    def flaky(handler):
        calls["n"] += 1
        if calls["n"] > 2:
            return handler._send_json(500, {"error": {"message": "boom"}})
        return original(handler)

    fake_api.RequestHandlerClass.do_POST = flaky
    try:
        at.button(key="run_output").click().run()
    finally:
        fake_api.RequestHandlerClass.do_POST = original
    table = at.dataframe[0].value
    assert len(table) == 2 and table["error"].iloc[0] == "" and "HTTP 500" in table["error"].iloc[1]
    assert any("HTTP 500" in e.value for e in at.error)


@pytest.mark.slow
def test_typed_key_is_used_but_never_sent_back(fake_api):
    state = {k: v for k, v in api_state(fake_api).items() if k != "session_api_key"}
    at = app(**state)
    at.run()
    at.text_input(key="api_key_input").input(KEY).run()
    assert at.text_input(key="api_key_input").value == ""
    assert KEY not in rendered(at)
    at.switch_page("app_pages/output.py").run()
    at.multiselect(key="output_lengths").set_value([8]).run()
    at.button(key="run_output").click().run()
    assert fake_api.requests[-1]["authorization"] == f"Bearer {KEY}"
    assert KEY not in rendered(at)
    run = at.session_state["history"]["output"][-1]  # what the download buttons serve
    exported = to_json(run.settings, {"rounds": run.rows}) + to_csv(run.settings, run.rows)
    assert KEY not in exported and '"api_key_set": true' in exported


@pytest.mark.slow
def test_key_never_reaches_the_page(fake_api):
    at = _run_cache(app(**api_state(fake_api, model="echo-key")), rounds=1)
    page = rendered(at)
    assert "is not valid" in page and KEY not in page
    table = at.dataframe[0].value
    assert KEY not in table.to_csv()


def _metric(at, label: str) -> str:
    """The number shown by the metric whose label is ``label`` (without its unit)."""
    return next(m.value for m in at.metric if m.label == label).split()[0]


@pytest.mark.slow
def test_home_page_quotes_this_sessions_numbers(fake_api):
    at = app(**api_state(fake_api))
    at.switch_page("app_pages/input.py").run()
    at.multiselect(key="input_sizes").set_value([128, 256]).run()
    at.button(key="run_input").click().run()
    prefill = _metric(at, "Prefill speed (median of the rounds)")
    at.switch_page("app_pages/output.py").run()
    at.multiselect(key="output_lengths").set_value([8, 16]).run()
    at.button(key="run_output").click().run()
    decode = _metric(at, "Decode speed")
    fake_api.requests.clear()
    fake_api.cached_script = [0, 0, 500, 0, 2]  # warm-up, append only 1 and 2, timestamp first 1 and 2
    _run_cache(at, rounds=2)
    sent = [sum(len(m["content"]) for m in r["body"]["messages"]) // 4 for r in fake_api.requests]  # the fake's count
    at.switch_page("app_pages/home.py").run()
    text = rendered(at)
    assert f"[[prefill]] ran at {prefill} tokens/s" not in text  # phase marks are drawn, not shown raw
    assert f"ran at {prefill} tokens/s" in text and f"at {decode} tokens/s" in text
    # its run's conclusion: the fake cached only 500 tokens of append only's round 2, so it names that rule
    assert f"append only recomputed a median of {sent[2] - 500:,} tokens per round, more than the 64" in text
    assert f"timestamp first: 2 rounds recomputed {sent[3] + sent[4] - 2:,} tokens" in text


@pytest.mark.slow
def test_page_settings_survive_a_page_switch():
    at = app(backend="llama", llama_url="http://127.0.0.1:9")  # no server needed to change settings
    at.switch_page("app_pages/cache.py").run()
    at.number_input(key="cache_rounds").set_value(3).run()
    at.switch_page("app_pages/home.py").run()
    at.switch_page("app_pages/cache.py").run()
    assert at.number_input(key="cache_rounds").value == 3
    assert not at.exception and not at.warning


@pytest.mark.slow
def test_a_run_that_failed_at_once_does_not_blame_the_backend_for_missing_counts(fake_api):
    at = _run_cache(app(**api_state(fake_api, model="500")), rounds=2)
    assert any("HTTP 500" in e.value for e in at.error)
    assert not any("does not report cached tokens" in i.value for i in at.info)
