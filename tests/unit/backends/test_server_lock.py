"""Runs that stop, and never corrupt each other: Stop against a silent server frees its lock at once, and two
runs on one llama-server (two processes, or the CLI and the app) are serialised, with a warning when a
client that takes no lock is on the server."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from core.backends import ChatRequest, LlamaServerBackend, OpenAICompatBackend
from core.backends.connect import Target
from core.backends.server_lock import ServerLock, normalize
from core.experiments.base import RunContext
from core.hosting import HostedSettings, guarded_transport
from core.runs.runner import RUNNING, STOPPED, BackgroundRun
from tests.support.apptest import ROOT


class SilentServer:
    """Accepts connections on 127.0.0.1 and reads the request; then says nothing (``headers=False``), or sends
    the stream's headers and one chunk and then nothing, as a stalled provider or a hung llama-server does."""

    def __init__(self, headers: bool) -> None:
        self.headers = headers
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.got_request = threading.Event()
        self.connections: list[socket.socket] = []
        threading.Thread(target=self._serve, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.listener.getsockname()[1]}/v1"

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            self.connections.append(conn)
            conn.recv(65536)
            if self.headers:
                chunk = b'data: {"choices":[{"index":0,"delta":{"role":"assistant"}}]}\n\n'
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
                             + b"%x\r\n%s\r\n" % (len(chunk), chunk))
            self.got_request.set()

    def close(self) -> None:
        self.listener.close()
        for conn in self.connections:
            conn.close()


@pytest.fixture()
def lock_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    return tmp_path


def one_request(backend: OpenAICompatBackend):
    def rows(run: RunContext) -> Iterator[Any]:
        result = backend.stream_chat(ChatRequest([{"role": "user", "content": "hi"}]), cancel=run.cancel)
        if not run.stopped():
            yield result
    return rows


@pytest.mark.parametrize("headers", [False, True], ids=["before-headers", "mid-stream"])
def test_stop_against_a_silent_server_frees_the_lock_in_under_a_second(headers: bool, lock_dir: Path):
    server = SilentServer(headers)
    backend = OpenAICompatBackend(server.url, "ok")
    try:
        run = BackgroundRun("x", {}, one_request(backend), lock_key=server.url, on_stop=backend.abort,
                            on_finish=backend.close).start()
        assert server.got_request.wait(60)
        time.sleep(0.3)  # the worker is now blocked reading from the silent server
        assert run.status == RUNNING
        stopped_at = time.monotonic()
        run.stop()
        second, give_up = ServerLock(server.url), threading.Event()
        threading.Timer(5.0, give_up.set).start()
        assert second.acquire(give_up), "the next run gets the server"
        freed = time.monotonic() - stopped_at
        second.release()
        run.join(60)
    finally:
        server.close()
    assert freed < 1.0, f"the lock was freed {freed:.2f} s after Stop"
    assert run.status == STOPPED and run.rows == [] and not run.error


def test_abort_also_cuts_a_hosted_guarded_connection():
    """The hosted transport checks every address it connects to; Stop still cuts what it opened."""
    server = SilentServer(headers=True)
    settings = HostedSettings(hosted=True, allowed_base_urls=(server.url,), allow_loopback=True)
    backend = OpenAICompatBackend(server.url, "ok", transport=guarded_transport(settings))
    cancel = threading.Event()
    results: list[Any] = []
    worker = threading.Thread(target=lambda: results.append(
        backend.stream_chat(ChatRequest([{"role": "user", "content": "hi"}]), cancel=cancel)))
    try:
        worker.start()
        assert server.got_request.wait(60)
        time.sleep(0.3)
        started = time.monotonic()
        cancel.set()
        backend.abort()
        worker.join(60)
        took = time.monotonic() - started
    finally:
        server.close()
        backend.close()
    assert took < 1.0 and results[0].error == "Stopped by the user."


HOLD = """
import sys, time
from core.backends.server_lock import ServerLock
lock = ServerLock(sys.argv[1])
lock.acquire()
print("held", flush=True)
time.sleep(float(sys.argv[2]))
"""


@pytest.mark.slow
def test_two_processes_on_one_server_are_serialised_and_the_waiter_hears_who_holds_it(lock_dir: Path):
    url = "http://127.0.0.1:8080"
    other = subprocess.Popen([sys.executable, "-c", HOLD, url + "/v1/", "1.5"], cwd=ROOT, stdout=subprocess.PIPE,
                             text=True, env={"XDG_RUNTIME_DIR": str(lock_dir), "PATH": "", "PYTHONPATH": str(ROOT)})
    try:
        assert other.stdout is not None and other.stdout.readline().strip() == "held"
        heard: list[str] = []
        started = time.monotonic()
        mine = ServerLock(url)
        assert mine.acquire(threading.Event(), heard.append)
        waited = time.monotonic() - started
        mine.release()
    finally:
        other.wait(60)
    assert waited > 0.8, "this run waited for the other process's run"
    assert heard == [f"pid {other.pid}: {normalize(url)}"]


def test_a_killed_holder_leaves_no_stale_lock(lock_dir: Path):
    url = "http://127.0.0.1:8081"
    other = subprocess.Popen([sys.executable, "-c", HOLD, url, "60"], cwd=ROOT, stdout=subprocess.PIPE, text=True,
                             env={"XDG_RUNTIME_DIR": str(lock_dir), "PATH": "", "PYTHONPATH": str(ROOT)})
    assert other.stdout is not None and other.stdout.readline().strip() == "held"
    other.kill()
    other.wait(60)
    lock = ServerLock(url)
    cancel = threading.Event()
    threading.Timer(2.0, cancel.set).start()
    assert lock.acquire(cancel), "the kernel released the dead process's lock"
    lock.release()


def test_apis_are_not_locked_llama_servers_are():
    assert Target("api", "https://api.deepseek.com/v1", "deepseek-chat").lock_key() is None
    assert Target("anthropic", "https://api.anthropic.com/v1", "claude").lock_key() is None
    assert Target("llama", "http://127.0.0.1:8080").lock_key() == "http://127.0.0.1:8080"
    assert Target("local", "http://127.0.0.1:9999").lock_key() == "http://127.0.0.1:9999"


@pytest.mark.slow
def test_two_api_runs_on_one_url_run_at_the_same_time(fake_api):
    """The lock is for a llama-server's slots, not for an API: two runs overlap."""
    fake_api.token_delay = 0.2
    overlap = threading.Barrier(2, timeout=10)

    def rows(run: RunContext) -> Iterator[Any]:
        overlap.wait()  # both runs are inside their source at once, or this times out
        with OpenAICompatBackend(fake_api.base_url, "ok") as backend:
            yield backend.stream_chat(ChatRequest([{"role": "user", "content": "hi"}]))

    target = Target("api", fake_api.base_url, "ok")
    runs = [BackgroundRun("x", {}, rows, lock_key=target.lock_key()).start() for _ in range(2)]
    for run in runs:
        run.join(60)
    assert [r.status for r in runs] == ["done", "done"]


class SlotsHandler(BaseHTTPRequestHandler):
    def log_message(self, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        body = json.dumps([{"id": 0, "is_processing": True}, {"id": 1, "is_processing": False}]).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.mark.slow
def test_a_client_that_takes_no_lock_is_seen_on_the_servers_slots_and_warned_about(lock_dir: Path):
    server = ThreadingHTTPServer(("127.0.0.1", 0), SlotsHandler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        with LlamaServerBackend(url) as backend:
            assert backend.busy_slots() == 1
            run = BackgroundRun("x", {}, lambda run: iter(()), lock_key=url,
                                busy_slots=backend.busy_slots).start()
            run.join(60)
    finally:
        server.shutdown()
    assert "Another client is using this server (1 slot(s) busy" in run.snapshot().warning


@pytest.mark.llama
def test_two_cli_runs_on_one_llama_server_are_serialised(tmp_path: Path, lock_dir: Path):
    """Two `python -m core` runs against one real llama-server: the second waits for the first and says so;
    neither is timed while the other runs."""
    from core.engine.server import LocalServer

    with LocalServer(log_dir=tmp_path) as server:
        cmd = [sys.executable, "-m", "core", "--backend", "llama", "--url", server.url, "--only", "output",
               "--lengths", "16", "--repeats", "2"]
        env = {"XDG_RUNTIME_DIR": str(lock_dir), "PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)}
        first = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 60
        while not ServerLock(server.url).holder() and time.monotonic() < deadline:
            time.sleep(0.05)
        second = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
        first_err = first.communicate(timeout=300)[1]
    assert first.returncode == 0 and second.returncode == 0, first_err + second.stderr
    assert f"Waiting for another run on this server (pid {first.pid}" in second.stderr
    assert "Waiting for another run" not in first_err
