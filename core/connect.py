"""Open a backend for an experiment: the embedded engine, a llama-server at a URL, or an API."""

from __future__ import annotations

import sys
from contextlib import ExitStack
from dataclasses import dataclass, field
from typing import Any

import httpx

from core.backends import LlamaServerBackend, OpenAICompatBackend, StreamingBackend
from core.engine import DEFAULT_CONTEXT, LocalServer
from core.prompts import EstimatingTokenCounter, ServerTokenCounter, TokenCounter


@dataclass
class Connection:
    """A backend with its token counter and what the server says about itself."""

    backend: StreamingBackend
    counter: TokenCounter
    context: int | None = None
    info: dict[str, Any] = field(default_factory=dict)

    def describe(self) -> dict[str, Any]:
        return {**self.backend.describe(), **self.info}


def connect_llama(url: str) -> Connection:
    """A running llama-server; raises ``httpx.HTTPError`` with a readable message when it does not
    answer ``/props``."""
    backend = LlamaServerBackend(url)
    try:
        props = backend.props()
    except httpx.ConnectError as exc:
        backend.close()
        raise httpx.ConnectError(f"Cannot reach a llama-server at {backend.origin}: is it running? ({exc})") from None
    except Exception:
        backend.close()
        raise
    backend.model = props["model_path"].rsplit("/", 1)[-1]
    info = {"model": backend.model, "n_ctx": props["n_ctx"], "server_build": props["build"]}
    return Connection(backend, ServerTokenCounter(backend), props["n_ctx"], info)


def connect_local_or_llama(backend: str, url: str | None, stack: ExitStack, context: int = DEFAULT_CONTEXT) -> Connection:
    """``local``: start the embedded server (stopped when ``stack`` closes); ``llama``: the one at ``url``."""
    if backend == "local":
        print("Starting the embedded llama-server...", file=sys.stderr)
        url = stack.enter_context(LocalServer(context=context)).url
    conn = connect_llama(url or "http://127.0.0.1:8080")
    stack.callback(conn.backend.close)
    return conn


def connect_api(base_url: str, model: str, api_key: str | None, transport: httpx.BaseTransport | None = None) -> Connection:
    """An OpenAI-compatible API; token counts are estimated until the first usage arrives."""
    return Connection(OpenAICompatBackend(base_url, model, api_key, transport=transport), EstimatingTokenCounter())
