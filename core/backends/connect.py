"""Open a connection to a backend from the registry: ``with open_connection(target) as conn:``.

A `Target` names a backend (`core.backends.BACKENDS`) and its address. For ``local`` the embedded
engine must already run (`engine_target` starts it for a command-line run; the app keeps one per
process); `open_connection` never starts a process.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, field
from typing import Any

import httpx

from core.backends import BACKENDS, LlamaServerBackend, StreamingBackend
from core.backends.tokens import EstimatingTokenCounter, ServerTokenCounter, TokenCounter
from core.engine.server import DEFAULT_CONTEXT, LocalServer
from core.words import Sentence


@dataclass(frozen=True)
class Target:
    """Where a run's requests go: a backend name from `BACKENDS` and its address (never printed with its key)."""

    backend: str
    url: str = ""
    model: str = ""
    api_key: str | None = field(default=None, repr=False)

    def lock_key(self) -> str | None:
        """Runs against one llama-server are serialised on this key (`core.backends.server_lock`), across
        processes; None for an API, which serves many clients at once and whose cache no run can evict."""
        spec = BACKENDS.get(self.backend)
        return self.url if spec is not None and spec.is_llama_server else None


@dataclass
class Connection:
    """A backend client with its token counter and what the server says about itself. Close it (or use ``with``)."""

    name: str  # the registry name of the backend
    backend: StreamingBackend
    counter: TokenCounter
    context: int | None = None
    info: dict[str, Any] = field(default_factory=dict)

    def describe(self) -> dict[str, Any]:
        """Settings safe to export: never the key."""
        return {**self.backend.describe(), "backend": self.name, **self.info}

    def close(self) -> None:
        self.backend.close()

    def abort(self) -> None:
        """Cut the connection's open requests now, from any thread (Stop)."""
        self.backend.abort()

    def busy_slots(self) -> int | None:
        """Slots another client is using on this llama-server now; None for an API or when it does not say."""
        return self.backend.busy_slots() if isinstance(self.backend, LlamaServerBackend) else None

    def __enter__(self) -> Connection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _connect_llama_server(name: str, url: str) -> Connection:
    backend = LlamaServerBackend(url)
    try:
        props = backend.props()
    except httpx.ConnectError as exc:
        backend.close()
        said = Sentence("backend_error.no_llama_server", url=backend.origin, error=str(exc))
        raise httpx.ConnectError(said) from None
    except Exception:
        backend.close()
        raise
    backend.model = props["model_path"].rsplit("/", 1)[-1]
    info = {"model": backend.model, "n_ctx": props["n_ctx"], "server_build": props["build"]}
    return Connection(name, backend, ServerTokenCounter(backend), props["n_ctx"], info)


def open_connection(target: Target, transport: httpx.BaseTransport | None = None) -> Connection:
    """Connect to ``target``. A llama-server is asked for its context and model (token counts exact);
    an API counts tokens by estimate until its first usage arrives.

    Raises ``httpx.HTTPError`` (a server that does not answer) or ``ValueError`` (missing settings)
    with a message a user can act on.
    """
    spec = BACKENDS.get(target.backend)
    if spec is None:
        raise ValueError(Sentence("backend_error.unknown_backend", backend=repr(target.backend),
                                  known=", ".join(BACKENDS)))
    if spec.is_llama_server:
        return _connect_llama_server(spec.name, target.url or "http://127.0.0.1:8080")
    if not target.url or not target.model:
        raise ValueError(Sentence("backend_error.no_url"))
    client = spec.client(target.url, target.model, target.api_key, transport=transport)
    return Connection(spec.name, client, EstimatingTokenCounter())


def engine_target(stack: ExitStack, context: int = DEFAULT_CONTEXT, slots: int = 1,
                  on_start: Callable[[], None] | None = None) -> Target:
    """Start the embedded llama-server (with ``slots`` parallel sequences) for a command-line run; it stops
    when ``stack`` closes. ``on_start`` is told first (the CLI says so on stderr): starting takes seconds."""
    if on_start is not None:
        on_start()
    return Target("local", url=stack.enter_context(LocalServer(context=context, slots=slots)).url)
