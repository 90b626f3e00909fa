"""Writes one folder's traces with the real tools, never by hand: starts the embedded llama-server (SmolLM2,
`core.engine.server.LocalServer`) and runs the folder's ``calls.py`` in the tools' own virtual environment with
the server's URL and the folder to write into. Each ``calls.py`` says which tools, and how to install them.

Usage: ``.venv/bin/python tests/data/doctor/traces/against_llama.py <folder> <the tools' python>``.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[3]))


def main(folder: str, python: str) -> None:
    from core.engine.server import LocalServer
    out = HERE / folder
    with LocalServer(context=4096, log_dir=Path("/tmp")) as server:
        subprocess.run([python, str(out / "calls.py"), server.url, str(out)], check=True, timeout=1200)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
