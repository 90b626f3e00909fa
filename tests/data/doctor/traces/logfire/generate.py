"""Writes this folder's traces with the real tools, never by hand: `calls.py` (``logfire.instrument_openai()`` around
the OpenAI SDK, in a virtual environment of its own) against the embedded llama-server (SmolLM2,
`core.engine.server.LocalServer`); Logfire (``send_to_logfire=False``) writes its console lines and the
OpenTelemetry SDK's ``ConsoleSpanExporter`` the spans.

Rerun: ``python3 -m venv /tmp/logfire-venv && /tmp/logfire-venv/bin/pip install logfire openai`` then
``.venv/bin/python tests/data/doctor/traces/logfire/generate.py /tmp/logfire-venv/bin/python`` (about a minute).
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
