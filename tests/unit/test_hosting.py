"""Hosted, API-only mode: allowed URLs only, no process, budgets, recorded results, keys kept apart."""

from __future__ import annotations

import json
import socket
import subprocess

import pytest

from core.backends import ChatRequest, OpenAICompatBackend
from core.engine.server import LocalServer
from core.experiments.samples import EMBEDDED_DEFAULT
from core.hosting import HostedSettings, Refused, check_base_url, guarded_transport, load_settings
from tests.support.apptest import KEY, PAGES, app, rendered

PUBLIC = [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("93.184.216.34", 443))]


def resolver(address: str):
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    return lambda host, port, proto=0: [(family, socket.SOCK_STREAM, 6, "", (address, port))]


HOSTED = HostedSettings(hosted=True, allowed_base_urls=("https://api.example.com/v1",))


def test_allowed_public_url_passes():
    check_base_url("https://api.example.com/v1/", HOSTED, resolve=lambda *a, **k: PUBLIC)


@pytest.mark.parametrize("address", ["127.0.0.1", "10.1.2.3", "192.168.0.7", "172.16.5.4", "169.254.169.254", "::1",
                                     "fe80::1", "0.0.0.0"])
def test_private_loopback_and_link_local_are_refused(address):
    with pytest.raises(Refused, match="loopback, private or link-local"):
        check_base_url("https://api.example.com/v1", HOSTED, resolve=resolver(address))


def test_every_connection_is_checked_again_when_it_is_made(fake_api, monkeypatch):
    """DNS rebinding: a host that resolved to a public address when its URL was checked, and to loopback
    when the client connects, is refused at the connection, and no request reaches the loopback server."""
    port = fake_api.base_url.rsplit(":", 1)[1].split("/")[0]
    url = f"http://rebind.example:{port}/v1"
    settings = HostedSettings(hosted=True, allowed_base_urls=(url,))
    check_base_url(url, settings, resolve=lambda *a, **k: PUBLIC)  # the first answer: public, allowed
    real_getaddrinfo = socket.getaddrinfo

    def rebound(host, *args, **kwargs):  # the second answer: loopback, where the fake server listens
        return real_getaddrinfo("127.0.0.1" if host == "rebind.example" else host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", rebound)
    with OpenAICompatBackend(url, "ok", transport=guarded_transport(settings)) as backend:
        result = backend.stream_chat(ChatRequest([{"role": "user", "content": "hi"}]))
    assert not result.success and "rebind.example resolves to 127.0.0.1" in result.error
    assert fake_api.requests == []
    loopback_ok = HostedSettings(hosted=True, allowed_base_urls=(url,), allow_loopback=True)
    with OpenAICompatBackend(url, "ok", transport=guarded_transport(loopback_ok)) as backend:
        assert backend.stream_chat(ChatRequest([{"role": "user", "content": "hi"}])).success
    assert len(fake_api.requests) == 1, "the guarded client connected to the address it checked"


def test_url_not_in_the_allow_list_is_refused():
    with pytest.raises(Refused, match="only calls its listed APIs"):
        check_base_url("https://evil.example.net/v1", HOSTED, resolve=lambda *a, **k: PUBLIC)


def test_local_mode_checks_nothing():
    check_base_url("http://127.0.0.1:8080/v1", HostedSettings(), resolve=resolver("127.0.0.1"))


def test_settings_from_environment_names():
    values = {"PREFILL_LAB_HOSTED": "true", "PREFILL_LAB_MAX_ROUNDS": "3", "PREFILL_LAB_MAX_DOC_MB": "0.5"}
    settings = load_settings(values.get)
    assert settings.hosted and settings.max_rounds == 3 and settings.max_doc_bytes == 512 * 1024
    assert "https://api.deepseek.com/v1" in settings.allowed_base_urls
    assert all(url.startswith("https://") for url in settings.allowed_base_urls)
    assert not load_settings({}.get).hosted


def test_budgets():
    settings = HostedSettings(hosted=True, max_rounds=4, max_tokens_per_run=1000, max_concurrency=2, max_rate=1.0)
    settings.check_run(4, 1000, at_once=2, per_second=1.0)
    with pytest.raises(Refused, match="allows 4 per run"):
        settings.check_run(5, 10)
    with pytest.raises(Refused, match="allows 1,000 per run"):
        settings.check_run(1, 1001)
    with pytest.raises(Refused, match="3 requests at once; this demo allows 2"):
        settings.check_run(1, 10, at_once=3)
    with pytest.raises(Refused, match="up to 2 requests a second; this demo allows 1"):
        settings.check_run(1, 10, per_second=2.0)
    assert load_settings({"PREFILL_LAB_HOSTED": "true"}.get).max_rate == 1.0


def hosted_app(fake_api=None, **secrets):
    at = app()
    at.secrets["PREFILL_LAB_HOSTED"] = "true"
    if fake_api is not None:
        at.secrets["PREFILL_LAB_ALLOWED_BASE_URLS"] = fake_api.base_url
        at.session_state["model"] = "ok"
    for name, value in secrets.items():
        at.secrets[name] = value
    return at


@pytest.fixture()
def no_spawn(monkeypatch):
    """Fails the test if anything starts a process or a local server."""
    spawned = []
    real_popen = subprocess.Popen

    def popen(*args, **kwargs):
        spawned.append(args)
        return real_popen(*args, **kwargs)

    monkeypatch.setattr(subprocess, "Popen", popen)
    monkeypatch.setattr(LocalServer, "start", lambda self: spawned.append("LocalServer.start") or self)
    return spawned


@pytest.mark.slow
def test_hosted_pages_show_only_apis_and_start_no_process(no_spawn):
    at = hosted_app()
    at.run()
    for page in PAGES:
        at.switch_page(page).run()
        assert not at.exception, page
    offered = at.sidebar.radio(key="backend").options
    assert "OpenAI-compatible API" in offered and not any("llama" in o or "Embedded" in o for o in offered)
    assert "Embedded local server" not in rendered(at)
    assert no_spawn == []


def test_hosted_refuses_a_loopback_url_even_when_listed(fake_api, no_spawn):
    at = hosted_app(fake_api)
    at.switch_page("app_pages/output.py").run()
    at.button(key="run_output").click().run()
    assert any("loopback, private or link-local" in e.value for e in at.error)
    assert fake_api.requests == [] and no_spawn == []


@pytest.mark.slow
def test_hosted_budget_and_upload_limit(fake_api):
    at = hosted_app(fake_api, PREFILL_LAB_ALLOW_LOOPBACK="true", PREFILL_LAB_MAX_ROUNDS="4",
                    PREFILL_LAB_MAX_DOC_MB="0.001")
    at.switch_page("app_pages/cache.py").run()
    at.number_input(key="cache_rounds").set_value(3).run()
    at.button(key="run_cache").click().run()
    assert any("allows 4 per run" in e.value for e in at.error) and fake_api.requests == []
    at.file_uploader(key="cache_upload").upload("big.txt", b"word " * 1000, "text/plain").run()
    assert any("the limit is" in e.value for e in at.error)


@pytest.mark.slow
def test_an_operator_key_never_goes_to_another_providers_url(fake_api):
    """Preset OpenAI with the operator's OpenAI key, but another allowed base URL chosen: no key is sent."""
    operator_key = "sk-OPERATOR-OPENAI-0123456789"
    at = hosted_app(fake_api, PREFILL_LAB_ALLOW_LOOPBACK="true", OPENAI_API_KEY=operator_key,
                    PREFILL_LAB_ALLOWED_BASE_URLS=f"{fake_api.base_url},https://api.openai.com/v1")
    at.session_state["preset"] = "OpenAI"
    at.session_state["base_url"] = fake_api.base_url
    at.switch_page("app_pages/output.py").run()
    assert not any("OPENAI_API_KEY" in c.value for c in at.sidebar.caption)  # the sidebar does not claim it
    at.multiselect(key="output_lengths").set_value([8]).run()
    at.button(key="run_output").click().run()
    assert fake_api.requests and all(r["authorization"] is None for r in fake_api.requests)
    assert operator_key not in rendered(at)


@pytest.mark.slow
def test_visitor_keys_stay_in_their_own_session(fake_api):
    first = hosted_app(fake_api, PREFILL_LAB_ALLOW_LOOPBACK="true")
    first.run()
    first.text_input(key="api_key_input").input(KEY).run()
    second = hosted_app(fake_api, PREFILL_LAB_ALLOW_LOOPBACK="true")
    for at in (first, second):
        at.switch_page("app_pages/output.py").run()
        at.multiselect(key="output_lengths").set_value([8]).run()
        at.button(key="run_output").click().run()
        assert any("Done: 1 rounds" in s.value for s in at.success)
    auth = [r["authorization"] for r in fake_api.requests]
    assert auth[:2] == [f"Bearer {KEY}"] * 2 and auth[2:] == [None, None]
    assert KEY not in rendered(first) and KEY not in rendered(second)


def test_recorded_results_without_any_key(no_spawn):
    recorded = [r for r in json.loads(EMBEDDED_DEFAULT.read_text())["rounds"] if r["experiment"] == "prefix_cache"]
    at = hosted_app()
    at.switch_page("app_pages/cache.py").run()
    at.button(key="recorded_cache").click().run()
    table = at.dataframe[0].value
    assert list(table["recomputed_tokens"]) == [r["recomputed_tokens"] for r in recorded]
    assert list(table["strategy"]) == [r["strategy"] for r in recorded]
    run = at.session_state["history"]["cache"][-1]
    assert run.label.startswith("recorded · ") and run.settings["recorded"] is True
    assert at.get("vega_lite_chart") and no_spawn == []


def test_the_operator_key_goes_only_to_its_presets_url(monkeypatch):
    from ui.session import api_key_for

    monkeypatch.setenv("OPENAI_API_KEY", "sk-operator-0123456789")
    assert api_key_for("OpenAI", None, "https://api.openai.com/v1/") == ("sk-operator-0123456789", "OPENAI_API_KEY")
    assert api_key_for("OpenAI", None, "https://openrouter.ai/api/v1") == (None, "")
    typed = "sk-typed-0123456789"
    assert api_key_for("OpenAI", typed, "https://openrouter.ai/api/v1") == (typed, "typed")


def test_a_setting_that_is_not_a_number_falls_back_to_its_default():
    settings = load_settings({"PREFILL_LAB_HOSTED": "true", "PREFILL_LAB_MAX_DOC_MB": "2MB",
                              "PREFILL_LAB_MAX_ROUNDS": "many"}.get)
    assert settings.max_doc_bytes == 1024 * 1024 and settings.max_rounds == 16
