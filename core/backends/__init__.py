"""Backend clients. Each one streams a chat completion and returns one `RequestResult`.

The registry maps the CLI's ``--backend`` names to the client class that serves them.
"""

from core.backends.base import ChatRequest, StreamingBackend
from core.backends.llama_server import LlamaServerBackend
from core.backends.openai_compat import OpenAICompatBackend
from core.backends.presets import PRESETS, Preset

BACKENDS: dict[str, type[StreamingBackend]] = {
    "llama": LlamaServerBackend,
    "api": OpenAICompatBackend,
}

__all__ = ["BACKENDS", "PRESETS", "ChatRequest", "LlamaServerBackend", "OpenAICompatBackend", "Preset", "StreamingBackend"]
