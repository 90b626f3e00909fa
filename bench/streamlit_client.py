"""A Streamlit visitor at the protocol level, no browser: what a new tab sends and waits for; and the app
started as a deploy runs it, with its process's CPU time and memory (Linux ``/proc``).

It does what the frontend does on opening the page: ``GET /_stcore/health`` (which sets the XSRF
cookie), a websocket to ``/_stcore/stream`` with the cookie's token in the subprotocol header, then a
``rerun_script`` back message; it reads forward messages until ``script_finished``. Each visit
records the time to its first drawn element and to the end of the script run (the page is drawn).
"""

from __future__ import annotations

import asyncio
import os
import shutil
import ssl
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import websockets
from streamlit.proto.BackMsg_pb2 import BackMsg
from streamlit.proto.ForwardMsg_pb2 import ForwardMsg

from tests.support.browser import running_app

TLS = ssl.create_default_context()  # one for every visitor's client: building one costs 40-50 ms of CPU


@dataclass
class Visit:
    first_delta_s: float | None = None
    finished_s: float | None = None
    pages: dict[str, str] = field(default_factory=dict)  # url path -> page script hash
    error: str = ""


def rerun(page_script_hash: str = "") -> bytes:
    msg = BackMsg()
    state = msg.rerun_script
    state.query_string = ""
    state.page_script_hash = page_script_hash
    state.context_info.timezone = "UTC"
    state.context_info.locale = "en-US"
    return msg.SerializeToString()


class Visitor:
    """One tab: `open` draws the first page, `switch` another one, `close` leaves."""

    def __init__(self, base: str, timeout: float = 120.0) -> None:
        self.base, self.timeout = base, timeout
        # Made before the clock starts, on the shared TLS context: CPU this process spends on a shared 2-core
        # host is taken from the server and counted as its wait.
        self.http = httpx.AsyncClient(timeout=timeout, verify=TLS)
        self.ws: websockets.ClientConnection | None = None
        self.visit = Visit()

    async def _until_finished(self, start: float, visit: Visit) -> None:
        assert self.ws is not None
        while True:
            data = await asyncio.wait_for(self.ws.recv(), self.timeout)
            msg = ForwardMsg()
            msg.ParseFromString(data if isinstance(data, bytes) else data.encode())
            kind = msg.WhichOneof("type")
            if kind == "delta" and visit.first_delta_s is None:
                visit.first_delta_s = time.perf_counter() - start
            elif kind == "navigation":
                visit.pages = {p.url_pathname: p.page_script_hash for p in msg.navigation.app_pages}
            elif kind == "script_finished":
                visit.finished_s = time.perf_counter() - start
                return

    async def open(self) -> Visit:
        start = time.perf_counter()
        try:
            health = await self.http.get(self.base + "/_stcore/health")
            cookie = health.cookies.get("_streamlit_xsrf", "")
            cookies = "; ".join(f"{name}={value}" for name, value in health.cookies.items())  # + a balancer's route
            ws_url = self.base.replace("http://", "ws://") + "/_stcore/stream"
            self.ws = await websockets.connect(
                ws_url, subprotocols=["streamlit", cookie] if cookie else ["streamlit"],  # type: ignore[list-item]
                additional_headers={"Origin": self.base, "Cookie": cookies},
                max_size=None, open_timeout=self.timeout)
            await self.ws.send(rerun())
            await self._until_finished(start, self.visit)
        except Exception as exc:  # noqa: BLE001 - a dropped or refused visit is a result, counted by the caller
            self.visit.error = f"{type(exc).__name__}: {exc}"
        return self.visit

    async def switch(self, url_path: str) -> Visit:
        visit = Visit()
        if self.ws is None or url_path not in self.visit.pages:
            visit.error = f"no page {url_path!r}"
            return visit
        try:
            await self.ws.send(rerun(self.visit.pages[url_path]))
            await self._until_finished(time.perf_counter(), visit)
        except Exception as exc:  # noqa: BLE001 - as in open
            visit.error = f"{type(exc).__name__}: {exc}"
        return visit

    async def alive(self) -> bool:
        """Still connected (the server's keepalive did not drop it)?"""
        if self.ws is None:
            return False
        try:
            await asyncio.wait_for(self.ws.ping(), self.timeout)
            return True
        except Exception:  # noqa: BLE001 - closed, in any way
            return False

    async def close(self) -> None:
        await self.http.aclose()
        if self.ws is not None:
            await self.ws.close()


ROOT = Path(__file__).resolve().parent.parent
STREAMLIT_DEFAULTS = ["--server.fileWatcherType", "auto", "--runner.postScriptGC", "true"]  # as without our config


@contextmanager
def app_server(flags: list[str]) -> Iterator[tuple[str, int]]:
    """``streamlit run`` the app (the repository's config.toml, then ``flags``) in hosted mode on a free port;
    yields its URL and pid. Hosted mode is set as a deploy sets it, in a secrets file (here the user-level
    one, in a temporary home), not in the environment."""
    home = Path(tempfile.mkdtemp(prefix="prefill-lab-bench-"))
    (home / ".streamlit").mkdir()
    (home / ".streamlit" / "secrets.toml").write_text('PREFILL_LAB_HOSTED = "true"\n')
    try:
        with running_app(env={**os.environ, "HOME": str(home)}, flags=flags) as (url, proc):
            yield url, proc.pid
    finally:
        shutil.rmtree(home, ignore_errors=True)


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (Linux ``/proc``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def load_average() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]
