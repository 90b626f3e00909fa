"""Cold start: the engine check (the CPU flags the binary needs, first time and cached), the model
load alone, and `make run` on a set-up machine until the app answers its health endpoint and a
first page in headless Chromium shows the embedded server as healthy."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

import httpx

from bench.common import finish, spread, table
from core.engine.choice import choose_binary
from core.engine.server import LocalServer, free_port

ROOT = Path(__file__).resolve().parent.parent
REPEATS = 3


def engine_check_s(first_time: bool) -> float:
    """Seconds to choose and check the binary; ``first_time`` with an empty cache (objdump runs)."""
    saved = os.environ.get("XDG_CACHE_HOME")
    with tempfile.TemporaryDirectory() as empty:
        if first_time:
            os.environ["XDG_CACHE_HOME"] = empty
        try:
            start = time.perf_counter()
            choose_binary()
            return time.perf_counter() - start
        finally:
            if saved is None:
                os.environ.pop("XDG_CACHE_HOME", None)
            else:
                os.environ["XDG_CACHE_HOME"] = saved


def model_load_s() -> float:
    start = time.perf_counter()
    with LocalServer():
        return time.perf_counter() - start


def make_run_s() -> tuple[float, float | None]:
    """Seconds to the app's health endpoint, and to a first page showing 'Healthy' (None without Chromium)."""
    port = free_port()
    start = time.perf_counter()
    proc = subprocess.Popen(["make", "run", f"PORT={port}"], cwd=ROOT, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        while True:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/_stcore/health", timeout=1).text == "ok":
                    break
            except httpx.HTTPError:
                time.sleep(0.05)
        health = time.perf_counter() - start
        chromium = shutil.which("chromium")
        if not chromium:
            return health, None
        from playwright.sync_api import sync_playwright

        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=chromium, args=["--no-sandbox", "--disable-gpu",
                                         "--disable-background-networking", "--no-first-run"])
            page = browser.new_page()
            page.goto(f"http://127.0.0.1:{port}/")
            page.get_by_text("Healthy").wait_for(timeout=120_000)
            first_page = time.perf_counter() - start
            browser.close()
        return health, first_page
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(20)


def main() -> dict:
    first_checks = [engine_check_s(first_time=True) for _ in range(REPEATS)]
    cached_checks = [engine_check_s(first_time=False) for _ in range(REPEATS)]
    loads = [model_load_s() for _ in range(REPEATS)]
    starts = [make_run_s() for _ in range(REPEATS)]
    rows = [("engine check, first time (objdump)", spread(first_checks)),
            ("engine check, cached", spread(cached_checks)),
            ("llama-server start to /health (model load)", spread(loads)),
            ("make run to app /_stcore/health", spread([s[0] for s in starts]))]
    if all(s[1] is not None for s in starts):
        rows.append(("make run to first page showing Healthy", spread([s[1] for s in starts])))
    print(table(rows, "s"))
    key = {name: stats["median"] for name, stats in rows}
    line = "; ".join(f"{name}: {value:.2f} s" for name, value in key.items())
    return finish("cold_start", {"rows": dict(rows)}, key, line)


if __name__ == "__main__":
    main()
