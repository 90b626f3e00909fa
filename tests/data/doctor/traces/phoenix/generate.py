"""Writes this folder's traces with the real tools, never by hand: `calls.py` (the OpenAI SDK instrumented by
OpenInference, openinference-instrumentation-openai, sending its spans to a real Phoenix server, arize-phoenix, run
on 127.0.0.1, and to the OpenTelemetry SDK's ``ConsoleSpanExporter``) against the embedded llama-server (SmolLM2,
`core.engine.server.LocalServer`). Phoenix's own answers are written as they came: its REST spans page byte for
byte, and its client's spans dataframe and span list saved the ways its documentation shows.

Rerun: ``python3 -m venv /tmp/phoenix-venv && /tmp/phoenix-venv/bin/pip install arize-phoenix
openinference-instrumentation-openai openai`` then
``.venv/bin/python tests/data/doctor/traces/phoenix/generate.py /tmp/phoenix-venv/bin/python`` (a few minutes).
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
        subprocess.run([python, str(HERE / "calls.py"), server.url, str(HERE)], check=True, timeout=1200)


if __name__ == "__main__":
    main(sys.argv[1])
