"""Capture proxy: pass an agent's LLM calls through to the real API and log what it sent.

The agent's base URL points here; every request goes to ``upstream`` with the request path and query
appended (``/v1`` is not doubled when the upstream URL already ends with it). The answer comes back as
it arrives: status, headers (minus hop-by-hop ones) and body bytes, a stream chunk by chunk, never
buffered. Each call to a model endpoint (path ending in one of `LOGGED_ENDPOINTS`) with a JSON body
appends one line to the log (`core.capture.log`); anything else passes through unlogged.

A call that reached the upstream is logged whatever the agent did: an agent that gave up (timed out,
disconnected) before the answer was passed on is logged with ``client_gone`` in its response, and the
proxy stops reading the upstream's answer for it. The pool to the upstream has no connection limit:
each agent connection gets an upstream connection of its own at once (httpx's default pool of 100 gave
the 101st concurrent call a 504 after waiting 60 s).
"""

from __future__ import annotations

import json
import select
import socket
import sys
import threading
import time
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx

from core.capture.log import TOO_DEEP, CaptureLog, ResponseWatcher, scrub, secrets_of

LOGGED_ENDPOINTS = ("/chat/completions", "/responses", "/completions", "/messages")
HOP_BY_HOP = frozenset({"connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te", "trailer",
                        "trailers", "transfer-encoding", "upgrade", "host", "content-length", "accept-encoding"})
UPSTREAM_TIMEOUT = httpx.Timeout(connect=10.0, read=600.0, write=60.0, pool=60.0)
UPSTREAM_LIMITS = httpx.Limits(max_connections=None, max_keepalive_connections=100)
DRAIN_SECONDS = 5.0  # on stop, how long calls in flight may take to finish and be logged


def _forwarded(headers: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """Headers minus hop-by-hop ones, including those the ``Connection`` header names."""
    named = {part.strip().lower() for name, value in headers if name.lower() == "connection"
             for part in value.split(",")}
    return [(name, value) for name, value in headers if name.lower() not in HOP_BY_HOP | named]


class CaptureHandler(BaseHTTPRequestHandler):
    """Forwards one request upstream and relays the answer; logs it when it is a model call."""

    server: CaptureServer
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # a small SSE chunk goes out at once, not after the agent's delayed ACK
    client_gone = False  # the agent closed its connection before the whole answer was passed on
    _headers_buffer: list[bytes]

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's signature
        pass  # the default line would show the query string, where some APIs put the key

    def do_POST(self) -> None:
        with self.server.in_flight:
            self._proxy()

    do_GET = do_PUT = do_PATCH = do_DELETE = do_OPTIONS = do_POST

    def _read_body(self) -> bytes:
        """The request's body; `ValueError` saying why when its framing cannot be read (a Content-Length that is
        no count, a chunk size that is no hex number)."""
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            parts = []
            while size := self._chunk_size():
                parts.append(self.rfile.read(size))
                self.rfile.readline()
            while self.rfile.readline().strip():
                pass  # trailers
            return b"".join(parts)
        given = self.headers.get("Content-Length") or "0"
        if not given.strip().isdigit():
            raise ValueError(f"Content-Length {given[:40]!r} is not a number of bytes")
        return self.rfile.read(int(given))

    def _chunk_size(self) -> int:
        line = self.rfile.readline(100).split(b";")[0].strip() or b"0"
        try:
            return int(line, 16)
        except ValueError:
            raise ValueError(f"chunk size {line[:40]!r} is not a hexadecimal number") from None

    def _agent_gone(self) -> bool:
        """Whether the agent closed its connection: its request was read whole, so the socket turns readable
        only at its end (or for a pipelined request, which no agent sends while it waits for an answer)."""
        try:
            ready, _, _ = select.select([self.connection], [], [], 0)
            return bool(ready) and self.connection.recv(1, socket.MSG_PEEK) == b""
        except (OSError, ValueError):
            return True

    def _end_headers(self) -> None:
        """`end_headers` without its write, which would raise unguarded when the agent is gone."""
        self._headers_buffer.append(b"\r\n")

    def _send(self, data: bytes) -> bool:
        """Write to the agent; False (and ``client_gone`` set) when it is gone."""
        if self.client_gone or self._agent_gone():
            self.client_gone = True
        else:
            head = b"".join(getattr(self, "_headers_buffer", []))
            self._headers_buffer = []
            try:
                self.wfile.write(head + data)  # headers (see `_end_headers`) go with the first bytes
                self.wfile.flush()
                return True
            except OSError:
                self.client_gone = True
        self.close_connection = True
        return False

    def _proxy(self) -> None:
        self.client_gone = False
        started, when = time.perf_counter(), datetime.now(timezone.utc).isoformat(timespec="milliseconds")
        target = urlsplit(self.path)
        try:
            body = self._read_body()
        except ValueError as exc:  # nothing is forwarded: the agent is told, and the proxy's output says it
            self._send_json(400, {"error": {"message": f"capture proxy: a malformed request ({exc})",
                                            "type": "malformed_request"}})
            self.close_connection = True
            self.server.say(f"{self.command} {target.path} -> 400: a malformed request ({exc}), not forwarded")
            return
        watcher = ResponseWatcher(started)
        headers = _forwarded(self.headers.items()) + [("Accept-Encoding", "identity")]
        url = self.server.upstream_url(target.path, target.query)
        try:
            upstream = self.server.client.send(
                self.server.client.build_request(self.command, url, headers=headers, content=body), stream=True)
        except httpx.HTTPError as exc:
            status = 504 if isinstance(exc, httpx.TimeoutException) else 502
            message = f"capture proxy: no answer from {self.server.upstream}: {str(exc) or type(exc).__name__}"
            self._send_json(status, {"error": {"message": message, "type": "upstream_unreachable"}})
            response = watcher.result(status, message)
        else:
            try:
                response = watcher.result(upstream.status_code, self._relay(upstream, watcher))
            finally:
                upstream.close()
        if self.client_gone:  # what the agent saw: not the whole answer (it may still be billed)
            response["client_gone"] = True
            self.server.gone += 1
        secrets = secrets_of(self.headers.items(), target.query)
        request = self._logged_request(target.path, body)  # after forwarding: a body it cannot parse still goes
        outcome = ""
        if request is not None:
            record = {"request": request, "response": response, "endpoint": target.path, "time": when}
            outcome = ", " + self.server.log.append(record, secrets, body)
        error = f" ({scrub(response['error'], secrets)})" if "error" in response else ""
        self.server.say(f"{self.command} {target.path} -> {response['status']} in {response['total_ms']:.0f} ms"
                        f"{outcome}{error}")

    def _logged_request(self, path: str, body: bytes) -> Any:
        """The JSON body of a model call (`TOO_DEEP` when too nested to parse), or None for a request that is
        passed through unlogged."""
        if self.command != "POST" or not path.endswith(LOGGED_ENDPOINTS):
            return None
        try:
            return json.loads(body)
        except RecursionError:
            return TOO_DEEP
        except ValueError:
            self.server.say(f"not logged: POST {path} has no JSON body")
            return None

    def _relay(self, upstream: httpx.Response, watcher: ResponseWatcher) -> str | None:
        """Send the upstream's answer on as it arrives; return what went wrong, if anything."""
        watcher.streaming = upstream.headers.get("content-type", "").startswith("text/event-stream")
        length = upstream.headers.get("content-length")
        has_body = upstream.status_code not in (204, 304)
        self.send_response_only(upstream.status_code, upstream.reason_phrase)
        for name, value in _forwarded(upstream.headers.multi_items()):
            self.send_header(name, value)
        if has_body and length:
            self.send_header("Content-Length", length)
        elif has_body:
            self.send_header("Transfer-Encoding", "chunked")
        self._end_headers()
        gone = "the agent disconnected before the whole answer was passed on"
        if not self._send(b""):  # the headers (buffered until now)
            return gone
        try:
            for data in upstream.iter_raw():
                watcher.feed(data)
                if not self._send(data if length else b"%x\r\n%s\r\n" % (len(data), data)):
                    return gone  # the upstream's answer is no longer read: the agent will never see it
        except httpx.HTTPError as exc:
            self.close_connection = True  # the agent sees the same cut: no final chunk
            return f"upstream stream cut: {str(exc) or type(exc).__name__}"
        if has_body and not length and not self._send(b"0\r\n\r\n"):
            return gone
        return None

    def _send_json(self, status: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self._end_headers()
        self._send(data)


class InFlight:
    """Counts the calls being proxied, so that a stop can wait for them."""

    def __init__(self) -> None:
        self.count = 0
        self._changed = threading.Condition()

    def __enter__(self) -> None:
        with self._changed:
            self.count += 1

    def __exit__(self, *exc: object) -> None:
        with self._changed:
            self.count -= 1
            self._changed.notify_all()

    def wait_idle(self, timeout: float) -> bool:
        with self._changed:
            return self._changed.wait_for(lambda: self.count == 0, timeout)


class CaptureServer(ThreadingHTTPServer):
    """The proxy: ``with CaptureServer(upstream, log_path) as proxy:`` serves on a thread;
    `serve_forever` in the caller's thread does too (the CLI)."""

    daemon_threads = True
    request_queue_size = 1024  # socketserver's 5 reset bursts of parallel agents (15 of 50 got through)

    def __init__(self, upstream: str, log_path: Path, host: str = "127.0.0.1", port: int = 0,
                 echo: bool = False, timeout: httpx.Timeout = UPSTREAM_TIMEOUT) -> None:
        parts = urlsplit(upstream)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ValueError(f"--upstream must be an http:// or https:// URL, got {upstream!r}")
        try:
            self.log = CaptureLog(log_path)
        except OSError as exc:
            raise OSError(f"cannot open the log {log_path}: {exc.strerror or exc}") from exc
        self.host = host
        self.upstream = upstream.rstrip("/")
        self.echo = echo
        self.in_flight = InFlight()
        self.gone = 0  # calls logged after their agent had gone
        self.client = httpx.Client(timeout=timeout, limits=UPSTREAM_LIMITS)
        try:
            super().__init__((host, port), CaptureHandler)  # on failure it calls server_close: all is closed
        except OSError as exc:
            raise OSError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from exc
        self._thread: threading.Thread | None = None

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.server_port}"

    def upstream_url(self, path: str, query: str) -> str:
        if urlsplit(self.upstream).path.endswith("/v1") and (path == "/v1" or path.startswith("/v1/")):
            path = path[3:]
        return self.upstream + path + ("?" + query if query else "")

    def say(self, line: str) -> None:
        if self.echo:
            print(line, file=sys.stderr, flush=True)

    def server_close(self) -> None:
        """Stop listening; give calls in flight `DRAIN_SECONDS` to be logged, then close the log."""
        super().server_close()
        self.in_flight.wait_idle(DRAIN_SECONDS)
        self.client.close()
        self.log.close()

    def __enter__(self) -> CaptureServer:
        self._thread = threading.Thread(target=self.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()
        self.server_close()
        if self._thread:
            self._thread.join(5)
