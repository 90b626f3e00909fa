"""Large agent logs for the cache doctor's memory and time checks (tests and bench)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

from core.documents import default_document


def append_only_log(path: Path, rounds: int = 1000, system_chars: int = 16_000) -> Path:
    """An agent that only appends: a fixed system prompt, then one more turn each round. 1,000 rounds make
    the issue's 42 MB log (each line repeats the whole history, as agents send it)."""
    system = {"role": "system", "content": (default_document() * 4)[:system_chars]}
    history: list[dict[str, str]] = []
    with path.open("w", encoding="utf-8") as handle:
        for n in range(rounds):
            history.append({"role": "user" if n % 2 == 0 else "assistant", "content": f"Turn {n + 1}: go on."})
            usage = {"prompt_tokens": 3000 + 8 * n, "prompt_tokens_details": {"cached_tokens": 2990 + 8 * n}}
            line = {"request": {"model": "agent", "messages": [system, *history]},
                    "response": {"status": 200, "usage": usage}}
            handle.write(json.dumps(line) + "\n")
    return path


ROOT = Path(__file__).resolve().parents[2]
_PEAK = "int(re.search(r'VmHWM:\\s+(\\d+)', open('/proc/self/status').read()).group(1))"  # this process's own peak
CLI = f"""
import re, sys, time
from core.cli.main import main
start, cpu = time.perf_counter(), time.process_time()
rc = main(["doctor", sys.argv[1]])
print("measured", time.perf_counter() - start, time.process_time() - cpu, {_PEAK}, rc, file=sys.stderr)
"""
PAGE = f"""
import re, sys, time
from pathlib import Path
from tests.support.apptest import api_state, app
from tests.support.fake_openai import FakeOpenAIServer
with FakeOpenAIServer() as fake:
    at = app(**api_state(fake), doctor_use_server=False)
    at.switch_page("app_pages/cache_doctor.py").run()
    at.file_uploader(key="doctor_files").upload("agent.jsonl", Path(sys.argv[1]).read_bytes(), "application/json")
    start, cpu = time.perf_counter(), time.process_time()  # the process's CPU: every thread's, the script's too
    at.run(timeout=900)
    seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
    ok = not at.exception and any("Prove the fix" == h.value for h in at.subheader)
    print("measured", seconds, cpu, {_PEAK}, 0 if ok else 1, file=sys.stderr)
"""


def measured(script: str, log: Path, timeout: float = 900, root: Path = ROOT) -> tuple[float, float, int, int]:
    """Seconds of the work (wall, then CPU), the process's peak resident memory (kB) and its result (0: fine),
    from a fresh Python process running the doctor's CLI (`CLI`) or its page under AppTest (`PAGE`) on
    ``log`` in the checkout at ``root``."""
    proc = subprocess.run([sys.executable, "-c", script, str(log)], capture_output=True, text=True, timeout=timeout,
                          cwd=root)
    found = re.search(r"measured (\S+) (\S+) (\d+) (\d+)", proc.stderr)
    assert found, proc.stderr[-3000:]
    return float(found.group(1)), float(found.group(2)), int(found.group(3)), int(found.group(4))
