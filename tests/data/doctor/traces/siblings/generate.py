"""Writes this folder's traces with the real tools, never by hand: `calls.py` (LiteLLM calling the OpenAI SDK, with
LiteLLM's own OpenTelemetry callback and OpenInference's OpenAI instrumentation both on, in a virtual environment of
their own) against the embedded llama-server (SmolLM2, `core.engine.server.LocalServer`). Each call is recorded
twice, as two spans side by side under the agent's span (LiteLLM writes its span after the call, from its success
callback, so it is not the parent of the client's span): the sibling duplicates the doctor must count once. The
OpenTelemetry SDK's ``ConsoleSpanExporter`` writes the file.

Rerun: ``python3 -m venv /tmp/litellm-venv && /tmp/litellm-venv/bin/pip install litellm
openinference-instrumentation-openai opentelemetry-sdk opentelemetry-exporter-otlp-proto-http openai`` then
``.venv/bin/python tests/data/doctor/traces/siblings/generate.py /tmp/litellm-venv/bin/python`` (about a minute).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[4]))


def main(python: str) -> None:
    from core.engine.server import LocalServer
    with LocalServer(context=4096, log_dir=Path("/tmp")) as server:
        subprocess.run([python, str(HERE / "calls.py"), server.url, str(HERE)], check=True, timeout=900)


if __name__ == "__main__":
    main(sys.argv[1])
