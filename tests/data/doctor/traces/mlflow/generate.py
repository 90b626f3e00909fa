"""Writes this folder's traces with the real tools, never by hand: `calls.py` (MLflow's ``mlflow.openai.autolog()``
around the OpenAI SDK, in a virtual environment of its own) against the embedded llama-server (SmolLM2,
`core.engine.server.LocalServer`); MLflow's own ``Trace.to_json()`` writes each file.

Rerun: ``python3 -m venv /tmp/mlflow-venv && /tmp/mlflow-venv/bin/pip install mlflow-skinny openai`` then
``.venv/bin/python tests/data/doctor/traces/mlflow/generate.py /tmp/mlflow-venv/bin/python`` (about a minute).
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
