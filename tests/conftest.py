"""Shared fixtures: one real embedded llama-server for the whole session, and the fake API server."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from core.connect import Connection, connect_llama  # noqa: E402
from core.engine import LocalServer  # noqa: E402
from tests.fake_openai import FakeOpenAIServer  # noqa: E402


@pytest.fixture(scope="session")
def local_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalServer]:
    server = LocalServer(context=4096, log_dir=tmp_path_factory.mktemp("llama"))
    with server:
        yield server
    assert not server.running(), "the llama-server outlived the test session"


@pytest.fixture()
def local(local_server: LocalServer) -> Iterator[Connection]:
    conn = connect_llama(local_server.url)
    yield conn
    conn.backend.close()


@pytest.fixture()
def fake_api() -> Iterator[FakeOpenAIServer]:
    with FakeOpenAIServer() as server:
        yield server
