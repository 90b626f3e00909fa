"""The real app under ``streamlit run`` for the browser tests and the load benchmarks, and the Chromium they use.

One way to start it: a free port on 127.0.0.1, headless, ``/_stcore/health`` polled until it answers, and
the process group ended (killed if it will not stop) when the block ends.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path

import httpx
from playwright.sync_api import expect

from core.engine.server import free_port
from tests.support.apptest import ROOT

IDLE = "[data-testid='stApp'][data-test-script-state='notRunning']"
# Every wait of the browser tests is for an event, with a deadline only a hang reaches: on a busy 2-core machine
# (load 8) a redraw takes seconds and a round tens of them. A check of what a redraw shows gets a minute (the
# default of every `expect`), one that waits on the server (a round, a level, a stop, a page load) five.
REDRAW_MS, EVENT_MS = 60_000, 300_000
expect.set_options(timeout=REDRAW_MS)


def reached(n: int, total: int, word: str = "Round") -> re.Pattern[str]:
    """The progress line once step ``n`` of ``total`` or a later one is under way: a redraw on a busy machine
    may skip a step, so waiting for exactly ``n`` could wait for ever."""
    return re.compile(rf"{word} ({'|'.join(str(i) for i in range(n, total + 1))}) of {total}\b")
CHROMIUM = os.environ.get("CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run", "--disable-quic"]


def start_app(log: Path | None = None, env: Mapping[str, str] | None = None, flags: Sequence[str] = (),
              root: Path = ROOT, port: int | None = None) -> tuple[str, subprocess.Popen[bytes]]:
    """``streamlit run streamlit_app.py`` in ``root`` on ``port`` (default: a free one), once it answers
    ``/_stcore/health``; its URL and process. Its output goes to ``log`` (appended), else nowhere."""
    port = port or free_port()
    cmd = [sys.executable, "-m", "streamlit", "run", "streamlit_app.py", "--server.headless", "true",
           "--server.port", str(port), "--browser.gatherUsageStats", "false", *flags]
    with (log.open("a") if log else open(os.devnull, "w")) as out:
        proc = subprocess.Popen(cmd, cwd=root, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
                                env=dict(env) if env is not None else None)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 180
    while True:
        try:
            if httpx.get(url + "/_stcore/health", timeout=1).text == "ok":
                return url, proc
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline or proc.poll() is not None:
            stop_app(proc)
            tail = log.read_text()[-2000:] if log else ""
            raise RuntimeError(f"streamlit did not start: {tail}")
        time.sleep(0.3)


def stop_app(proc: subprocess.Popen[bytes]) -> None:
    """End the app (killed if it will not stop: a server still busy with a burst it could not serve)."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(15)


@contextmanager
def running_app(log: Path | None = None, env: Mapping[str, str] | None = None,
                flags: Sequence[str] = (), root: Path = ROOT) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """`start_app` for a block: yields its URL and process, and ends it when the block ends."""
    url, proc = start_app(log, env, flags, root)
    try:
        yield url, proc
    finally:
        stop_app(proc)
