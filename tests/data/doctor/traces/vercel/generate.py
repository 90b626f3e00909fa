"""Writes this folder's ``ai_sdk_*.json`` with the real tools: `generate.mjs` (the Vercel AI SDK and the
OpenTelemetry JS SDK, installed with npm into a folder outside the repository) against the embedded llama-server.

Rerun: ``npm install --prefix /tmp/vercel-gen ai @ai-sdk/openai-compatible @opentelemetry/sdk-trace-base
@opentelemetry/api @opentelemetry/context-async-hooks zod`` then
``.venv/bin/python tests/data/doctor/traces/vercel/generate.py /tmp/vercel-gen``.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[4]))


def main(packages: Path) -> None:
    from core.engine.server import LocalServer
    script = packages / "generate.mjs"  # ESM resolves packages from the script's own folder
    shutil.copy(HERE / "generate.mjs", script)
    with LocalServer(context=4096, log_dir=Path("/tmp")) as server:
        subprocess.run(["node", str(script), server.url, str(HERE)], check=True, timeout=900)


if __name__ == "__main__":
    main(Path(sys.argv[1]))
