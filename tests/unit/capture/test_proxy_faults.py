"""The capture proxy when the agent gives up first and when many agents stream at once, over real HTTP on
127.0.0.1: every call that reached the upstream is logged, with ``client_gone`` when the agent did not
see the whole answer."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest

from core.capture.proxy import CaptureServer
from tests.support.agents import post_at_once
from tests.support.apptest import ROOT

CHAT = "/v1/chat/completions"
FIRST = b'data: {"choices": [{"index": 0, "delta": {"content": "Pre"}}]}\n\n'
REST = (b'data: {"choices": [{"index": 0, "delta": {"content": "fill"}}]}\n\n'
        b'data: {"choices": [], "usage": {"prompt_tokens": 9, "completion_tokens": 2}}\n\ndata: [DONE]\n\n')


class Stalling(BaseHTTPRequestHandler):
    """An upstream that answers as the request's model says: ``one-chunk`` sends a chunk and stalls,
    ``headers-only`` sends the headers and stalls, ``silent`` never answers; each stall lasts until the
    test sets ``server.resume``. ``together`` holds every stream after its first chunk until
    ``server.expected`` of them are in flight at once."""

    server: StallingServer
    protocol_version = "HTTP/1.1"

    def log_message(self, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        with self.server.guard:
            self.server.received.append(body["messages"][0]["content"])
        model = body["model"]
        if model == "silent":
            self.server.resume.wait(30)
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Content-Length", str(len(FIRST) + len(REST)))
        self.end_headers()
        if model in ("one-chunk", "together"):
            self.wfile.write(FIRST)
            self.wfile.flush()
        if model != "together":
            self.server.resume.wait(30)
        elif not self.server.all_in.wait(20):
            with self.server.guard:
                self.server.held_back += 1  # this stream ended before the others had all arrived
        if model == "headers-only":
            self.wfile.write(FIRST)
        self.wfile.write(REST)


class StallingServer(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 1024

    def __init__(self, expected: int = 0) -> None:
        super().__init__(("127.0.0.1", 0), Stalling)
        self.guard = threading.Lock()
        self.received: list[str] = []
        self.resume = threading.Event()
        self.all_in = threading.Event()
        self.expected = expected
        self.held_back = 0
        self.all_in_at = 0.0  # perf_counter() when the last expected stream arrived

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # the proxy closes a stream whose agent has gone: this upstream's write then fails, as it should

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


@pytest.fixture()
def upstream() -> Iterator[StallingServer]:
    server = StallingServer()
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield server
    server.resume.set()
    server.all_in.set()
    server.shutdown()
    server.server_close()


def _records(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def _chat(model: str, content: str) -> dict[str, Any]:
    return {"model": model, "messages": [{"role": "user", "content": content}], "stream": True}


@pytest.mark.parametrize("model", ["one-chunk", "headers-only", "silent"])
def test_a_call_the_agent_gave_up_on_is_logged_with_client_gone(upstream: StallingServer, tmp_path: Path, model: str,
                                                                capfd: pytest.CaptureFixture[str]) -> None:
    log = tmp_path / "capture.jsonl"
    # the proxy gives a silent upstream 1.5 s (600 s in use); the agent gives up after 0.5 s
    timeout = httpx.Timeout(connect=5.0, read=1.5, write=5.0, pool=None)
    with CaptureServer(upstream.url, log, echo=True, timeout=timeout) as proxy:
        with pytest.raises(httpx.ReadTimeout), httpx.Client(timeout=httpx.Timeout(5.0, read=0.5)) as agent:
            with agent.stream("POST", proxy.base_url + CHAT, json=_chat(model, "gave up")) as response:
                for _ in response.iter_raw():
                    pass
        upstream.resume.set()  # the upstream goes on after the agent has gone
        assert proxy.in_flight.wait_idle(10)
        assert (proxy.log.count, proxy.gone) == (1, 1)
    (record,) = _records(log)
    assert upstream.received == ["gave up"] and record["request"]["messages"][0]["content"] == "gave up"
    assert record["response"]["client_gone"] is True
    expected = 504 if model == "silent" else 200
    assert record["response"]["status"] == expected and record["response"]["error"]
    err = capfd.readouterr().err
    assert "Traceback" not in err and "BrokenPipeError" not in err and ", logged" in err


def test_an_agent_that_reads_the_whole_answer_is_not_client_gone(upstream: StallingServer, tmp_path: Path) -> None:
    log = tmp_path / "capture.jsonl"
    upstream.resume.set()
    with CaptureServer(upstream.url, log) as proxy:
        for model in ("one-chunk", "headers-only"):
            response = httpx.post(proxy.base_url + CHAT, json=_chat(model, model), timeout=10)
            assert response.status_code == 200 and response.content == FIRST + REST
        assert proxy.in_flight.wait_idle(10)
    records = _records(log)
    assert len(records) == 2 and not any("client_gone" in r["response"] for r in records)
    assert all(r["response"]["usage"]["completion_tokens"] == 2 for r in records)


@pytest.mark.slow
def test_120_concurrent_long_streams_all_reach_the_upstream_at_once_and_are_logged(tmp_path: Path) -> None:
    """httpx's default pool (100 connections) held the 101st call back, and gave it a 504 after 60 s: here
    the upstream holds every stream open until all 120 are in flight together."""
    agents = 120
    upstream = StallingServer(expected=agents)
    thread = threading.Thread(target=upstream.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    watcher = threading.Thread(target=lambda: _release_when_all_in(upstream), daemon=True)
    watcher.start()
    log = tmp_path / "capture.jsonl"
    try:
        with CaptureServer(upstream.url, log) as proxy:
            answers = post_at_once(proxy.base_url + CHAT, [_chat("together", f"{n}") for n in range(agents)])
            assert proxy.in_flight.wait_idle(10)
    finally:
        upstream.all_in.set()
        upstream.shutdown()
        upstream.server_close()
    bodies = [a.content if isinstance(a, httpx.Response) else a for a in answers]
    failed = [b for b in bodies if b != FIRST + REST]
    assert len(bodies) == agents and not failed, f"{len(failed)} of {agents} failed: {failed[:3]}"
    assert upstream.held_back == 0 and len(upstream.received) == agents
    records = _records(log)
    assert sorted(int(r["request"]["messages"][0]["content"]) for r in records) == list(range(agents))
    assert all(r["response"]["status"] == 200 and "client_gone" not in r["response"] for r in records)


def _release_when_all_in(upstream: StallingServer) -> None:
    """Let the streams finish once every one has reached the upstream (never, when some are held back)."""
    while not upstream.all_in.is_set():
        with upstream.guard:
            if len(upstream.received) >= upstream.expected:
                upstream.all_in_at = time.perf_counter()
                upstream.all_in.set()
        upstream.resume.wait(0.05)


def test_the_cli_counts_a_call_whose_agent_gave_up_in_its_last_line(upstream: StallingServer, tmp_path: Path) -> None:
    log = tmp_path / "capture.jsonl"
    process = subprocess.Popen([sys.executable, "-m", "core", "capture", "--upstream", upstream.url, "--port", "0",
                                "--out", str(log)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        assert process.stdout is not None
        base = ""
        while not base:
            line = process.stdout.readline()
            assert line, "the proxy exited before saying where it listens"
            if "OpenAI-compatible base URL:" in line:
                base = line.split("base URL:")[1].split()[0]
        with pytest.raises(httpx.ReadTimeout), httpx.Client(timeout=httpx.Timeout(5.0, read=0.5)) as agent:
            with agent.stream("POST", base + "/chat/completions", json=_chat("one-chunk", "gave up")) as response:
                for _ in response.iter_raw():
                    pass
        upstream.resume.set()
        deadline = time.monotonic() + 60
        while not log.exists() or not log.read_text().strip():
            assert time.monotonic() < deadline, "the call was not logged within 60 s"
            time.sleep(0.05)
        process.send_signal(signal.SIGINT)
        out, err = process.communicate(timeout=120)
    finally:
        process.kill()
    assert process.returncode == 0 and "Traceback" not in err, err
    assert "calls logged: 1," in out and "1 of them after the agent had gone (client_gone" in out
    assert _records(log)[0]["response"]["client_gone"] is True


@pytest.mark.parametrize("head", [
    b"Content-Length: lots\r\n",
    b"Content-Length: -5\r\n",
    b"Transfer-Encoding: chunked\r\n",  # then a chunk size that is not hex
])
def test_a_malformed_request_gets_a_400_and_a_log_line(upstream: StallingServer, tmp_path: Path, head: bytes,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    with CaptureServer(upstream.url, tmp_path / "capture.jsonl", echo=True) as proxy:
        address = proxy.server_address
        with socket.create_connection((str(address[0]), int(address[1])), timeout=60) as agent:
            agent.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n" + head + b"\r\nzz\r\n{}")
            answer = b""
            while chunk := agent.recv(65536):
                answer += chunk
        assert proxy.in_flight.wait_idle(60)
    assert answer.startswith(b"HTTP/1.1 400"), answer[:200]
    err = capsys.readouterr().err
    assert "POST /v1/chat/completions -> 400" in err and "Traceback" not in err, err
    assert upstream.received == []  # nothing forwarded
