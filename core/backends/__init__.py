"""Backend clients and the one registry of backends.

`BACKENDS` is the single source of the backend names: the CLI's ``--backend`` choices, the sidebar's
options, the exports' ``backend`` field and `core.backends.connect.open_connection`'s dispatch all read it
(as vLLM's benchmark clients dispatch on one dict). A client streams one chat request and returns
one `RequestResult`.
"""

from __future__ import annotations

from dataclasses import dataclass

from core.backends.anthropic import AnthropicBackend
from core.backends.base import ChatRequest, StreamingBackend
from core.backends.llama_server import LlamaServerBackend
from core.backends.openai_compat import OpenAICompatBackend
from core.backends.presets import PRESETS, Preset

# What a backend needs from the user before it can connect.
ENGINE = "engine"  # nothing: the embedded llama-server is started for them
SERVER_URL = "server_url"  # the URL of a llama-server they run
API = "api"  # a base URL, a model and a key (presets fill them in)


@dataclass(frozen=True)
class BackendSpec:
    """One backend: its name everywhere, its client and what it needs."""

    name: str
    client: type[StreamingBackend]
    summary: str  # one line, for --help
    needs: str  # ENGINE, SERVER_URL or API
    hosted: bool  # offered by a hosted (API-only) deploy

    @property
    def is_llama_server(self) -> bool:
        """A llama-server: exact token counts, chat template, recomputed/reused tokens reported."""
        return issubclass(self.client, LlamaServerBackend)


BACKENDS: dict[str, BackendSpec] = {
    spec.name: spec
    for spec in (
        BackendSpec("local", LlamaServerBackend, "the embedded llama-server, started for you", ENGINE, False),
        BackendSpec("llama", LlamaServerBackend, "a llama-server you run, at --url", SERVER_URL, False),
        BackendSpec("api", OpenAICompatBackend, "an OpenAI-compatible streaming API (--preset or --url/--model)", API,
                    True),
        BackendSpec("anthropic", AnthropicBackend, "Anthropic's Messages API, explicit prompt caching "
                    "(--preset Anthropic or --url/--model)", API, True),
    )
}

__all__ = ["API", "AnthropicBackend", "BACKENDS", "ENGINE", "PRESETS", "SERVER_URL", "BackendSpec", "ChatRequest",
           "LlamaServerBackend",
           "OpenAICompatBackend", "Preset", "StreamingBackend"]
