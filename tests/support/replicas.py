"""Several replicas of the app behind Debian's nginx on one machine, all on 127.0.0.1: for the replica tests,
the hosted-crowd benchmark and ``make replicas`` (scripts/replicas.py).

Streamlit keeps a session (its state, uploads, media) in the process that opened it, so a visitor's every
request must reach the same replica: nginx hashes a route cookie it sets on the first response (a cookie,
not the address: every visitor behind one proxy or NAT, and every test on 127.0.0.1, has the same one), and
upgrades ``/_stcore/stream`` to a WebSocket. `site_config` is the config the README gives an operator;
`nginx_config` wraps it in what one unprivileged nginx needs to run from a temporary folder, with an access
log that names the replica behind each request (a test reads where a visitor landed).
"""

from __future__ import annotations

import os
import re
import secrets
import shutil
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType

import httpx

from core.engine.server import free_port
from tests.support.browser import start_app, stop_app

LISTEN = 8080
PORTS = (8501, 8502, 8503)
ROUTE_COOKIE = "prefill_lab_route"
NGINX = shutil.which("nginx") or "/usr/sbin/nginx"


def site_config(listen: int = LISTEN, ports: Sequence[int] = PORTS, host: str = "127.0.0.1") -> str:
    """The ``http { }`` part of nginx's config for ``ports`` behind ``listen`` (the README shows the default)."""
    servers = "\n".join(f"    server {host}:{port} max_fails=1 fail_timeout=10s;" for port in ports)
    return f"""\
# Sticky sessions: a first response sets a random route cookie; the cookie picks the replica from then on.
map $cookie_{ROUTE_COOKIE} $prefill_lab_route {{
    ""      $request_id;
    default $cookie_{ROUTE_COOKIE};
}}
map $cookie_{ROUTE_COOKIE} $prefill_lab_set_route {{
    ""      "{ROUTE_COOKIE}=$request_id; Path=/; HttpOnly; SameSite=Lax";
    default "";
}}
# WebSocket upgrade for Streamlit's /_stcore/stream; plain requests keep their upstream connection alive.
map $http_upgrade $prefill_lab_connection {{
    default upgrade;
    ""      "";
}}
upstream prefill_lab {{
    hash $prefill_lab_route consistent;  # a replica that is down: its visitors move to the next one
{servers}
    keepalive 16;
}}
server {{
    listen {host}:{listen};
    client_max_body_size 6m;             # the app's 5 MB upload cap, plus the form around it
    location / {{
        proxy_pass http://prefill_lab;
        proxy_http_version 1.1;
        proxy_set_header Upgrade $http_upgrade;
        proxy_set_header Connection $prefill_lab_connection;
        proxy_set_header Host $host;
        proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;
        proxy_read_timeout 1h;           # a session's WebSocket lives as long as its tab
        proxy_buffering off;
        add_header Set-Cookie $prefill_lab_set_route;
    }}
}}
"""


def nginx_config(folder: Path, listen: int, ports: Sequence[int]) -> str:
    """A whole nginx.conf that runs in the foreground from ``folder`` (pid, logs, temporary files there)."""
    temp = "\n".join(f"    {name}_temp_path {folder / name};" for name in ("client_body", "proxy", "fastcgi",
                                                                          "uwsgi", "scgi"))
    user = "user root;\n" if os.geteuid() == 0 else ""  # as root, workers would run as nobody and not reach folder
    site = "\n".join(f"    {line}" if line else "" for line in site_config(listen, ports).splitlines())
    return f"""\
{user}daemon off;
worker_processes 1;
pid {folder / "nginx.pid"};
error_log {folder / "error.log"} warn;
events {{
    worker_connections 4096;
}}
http {{
    log_format replicas '$cookie_{ROUTE_COOKIE} $upstream_addr $status "$request"';
    access_log {folder / "access.log"} replicas;
{temp}
{site}
}}
"""


class Replicas:
    """``n`` ``streamlit run`` replicas with ``env`` (``PREFILL_LAB_DB`` pointing at one store) and nginx in front.

    All replicas share one cookie secret (Streamlit signs its cookies with it), given in the environment,
    never on a command line. `kill` ends one with SIGKILL (no clean-up at all), `start` brings it back on its
    port; `landed` says which replica served the requests carrying a route cookie.
    """

    def __init__(self, folder: Path, n: int = 2, env: Mapping[str, str] | None = None,
                 listen: int | None = None, ports: Sequence[int] | None = None,
                 flags: Sequence[str] = ()) -> None:
        self.folder = folder
        self.ports = list(ports or [free_port() for _ in range(n)])
        self.listen = listen or free_port()
        self.url = f"http://127.0.0.1:{self.listen}"
        self.env = {**(env if env is not None else os.environ),
                    "STREAMLIT_SERVER_COOKIE_SECRET": secrets.token_hex(32)}
        self.flags = ["--server.address", "127.0.0.1", *flags]
        self.procs: list[subprocess.Popen[bytes] | None] = [None] * len(self.ports)
        self.nginx: subprocess.Popen[bytes] | None = None

    def log(self, i: int) -> Path:
        return self.folder / f"replica-{i}.log"

    def start(self, i: int) -> None:
        _, self.procs[i] = start_app(self.log(i), env=self.env, flags=self.flags, port=self.ports[i])

    def kill(self, i: int) -> None:
        proc = self.procs[i]
        if proc is not None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(15)
            self.procs[i] = None

    def stop(self, i: int) -> None:
        proc = self.procs[i]
        if proc is not None:
            stop_app(proc)
            self.procs[i] = None

    def pid(self, i: int) -> int:
        proc = self.procs[i]
        assert proc is not None, f"replica {i} is not running"
        return proc.pid

    def __enter__(self) -> Replicas:
        self.folder.mkdir(parents=True, exist_ok=True)
        try:
            for i in range(len(self.ports)):
                self.start(i)
            conf = self.folder / "nginx.conf"
            conf.write_text(nginx_config(self.folder, self.listen, self.ports))
            with (self.folder / "nginx.out").open("a") as out:
                self.nginx = subprocess.Popen([NGINX, "-p", str(self.folder), "-c", str(conf), "-e",
                                               str(self.folder / "error.log")], stdout=out, stderr=subprocess.STDOUT,
                                              start_new_session=True)
            deadline = time.monotonic() + 120
            while True:
                try:
                    if httpx.get(self.url + "/_stcore/health", timeout=1).text == "ok":
                        break
                except httpx.HTTPError:
                    pass
                if self.nginx.poll() is not None or time.monotonic() > deadline:
                    errors = (self.folder / "error.log").read_text() if (self.folder / "error.log").exists() else ""
                    raise RuntimeError(f"nginx did not start: {errors[-2000:]}")
                time.sleep(0.2)
        except BaseException:
            self.close()
            raise
        return self

    def close(self) -> None:
        if self.nginx is not None and self.nginx.poll() is None:
            self.nginx.send_signal(signal.SIGQUIT)  # graceful: open connections finish
            try:
                self.nginx.wait(60)
            except subprocess.TimeoutExpired:
                self.nginx.kill()
                self.nginx.wait(60)
        for i in range(len(self.ports)):
            self.stop(i)

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.close()

    def log_size(self) -> int:
        log = self.folder / "access.log"
        return log.stat().st_size if log.exists() else 0

    def landed(self, route: str, path: str = "/", since: int = 0) -> list[int]:
        """The replicas (indexes) that served the requests under ``path`` with route cookie ``route``, in order,
        from byte ``since`` of the access log on (nginx logs a request when it ends: a WebSocket when it closes)."""
        log = self.folder / "access.log"
        if not log.exists():
            return []
        with log.open("rb") as f:
            f.seek(since)
            text = f.read().decode()
        served = []
        for line in text.splitlines():
            match = re.match(r"(\S*) (\S+) \d+ \"\w+ (\S+)", line)
            if match and match[1] == route and match[3].startswith(path):
                port = int(match[2].rsplit(":", 1)[1]) if ":" in match[2] else 0
                if port in self.ports:
                    served.append(self.ports.index(port))
        return served

    def restart_all(self) -> None:
        """Stop every replica, then start them again on their ports (a redeploy), and wait until nginx sends
        requests to each again (it keeps a replica that refused a connection out for ``fail_timeout``)."""
        for i in range(len(self.ports)):
            self.stop(i)
        for i in range(len(self.ports)):
            self.start(i)
        deadline = time.monotonic() + 30
        while True:
            try:
                self.route_to(len(self.ports) - 1, tries=20)
                self.route_to(0, tries=20)
                return
            except RuntimeError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(1)

    def route_to(self, i: int, tries: int = 1000) -> str:
        """A route cookie value that nginx sends to replica ``i`` (found by asking: nginx's hash is its own)."""
        for n in range(tries):
            route, since = f"probe{n}", self.log_size()
            answer = httpx.get(self.url + "/_stcore/health", cookies={ROUTE_COOKIE: route}, timeout=10)
            deadline = time.monotonic() + 30
            while answer.status_code == 200 and not self.landed(route, "/_stcore/health", since) \
                    and time.monotonic() < deadline:
                time.sleep(0.02)  # nginx writes the line just after the answer
            if answer.status_code == 200 and self.landed(route, "/_stcore/health", since) == [i]:
                return route
        raise RuntimeError(f"no route cookie reaches replica {i}")
