"""A chat endpoint on 127.0.0.1 with ONE slot and a known service time (experiment 8's tests and benchmark), run in a
process of its own (`SlotProcess`): requests are served one at a time in the order they arrived, the others wait
their turn, and its threads never wait for the client's interpreter lock (in one process they did, by up to 134 ms
on a busy machine, and that was counted as queue).

Like llama-server, a stream says when its prompt began (a ``prompt_progress`` chunk with ``time_ms`` 0 as the slot
takes it) and ends with ``timings`` (``prompt_ms``, ``predicted_ms``). With ``--processing-header`` it answers as an
OpenAI-compatible API instead: no progress or timings, and the response headers, sent once the first token is
ready, carry ``openai-processing-ms`` (whole milliseconds from the request's arrival, as OpenAI's API sends them).

``GET /served`` reports each request's arrival, start and release of the slot (seconds on this process's
``time.perf_counter``; their differences are durations in any process) and the header it sent, under the tag its
user message starts with, so a test computes the queue from the server's own timings instead of assuming them.

Run alone: ``python -m tests.support.fake_slot --prefill-s 0.05 --token-s 0.01``; it prints ``ready <url>`` once it
listens.
"""

from __future__ import annotations

import argparse
import json
import selectors
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx

from tests.support import ROOT

READY_S = 60.0  # the bound on the fake's start (an import on a busy machine), not a wait: its line ends it
PROCESSING_HEADER = "openai-processing-ms"


def _data(payload: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(payload).encode() + b"\n\n"


def _delta(content: str | None, finish: str | None = None, **extra: Any) -> bytes:
    return _data({"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {"content": content},
                                                                  "finish_reason": finish}], **extra})


class Handler(BaseHTTPRequestHandler):  # noqa: D101
    server: OneSlotServer
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # as llama-server's HTTP library: a small write is sent at once, not held for an ACK

    def log_message(self, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        with self.server.turn:
            body = {"served": self.server.served} if self.path == "/served" else {"status": "ok"}
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _write(self, data: bytes) -> None:
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    def do_POST(self) -> None:
        arrived = time.perf_counter()
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
        tag = str(body["messages"][-1]["content"]).split("\n")[0]
        server = self.server
        with server.turn:
            ticket = server.tickets
            server.tickets += 1
            server.turn.wait_for(lambda: server.serving == ticket)
        started = time.perf_counter()
        header: int | None = None
        try:
            header = self._serve(int(body.get("max_tokens", 4)), arrived)
        finally:
            with server.turn:
                server.served[tag] = (arrived, started, time.perf_counter(), header)
                server.serving += 1
                server.turn.notify_all()

    def _serve(self, tokens: int, arrived: float) -> int | None:
        """The stream; the processing header it sent, if any."""
        server, started = self.server, time.perf_counter()
        header = None
        if server.processing_header:  # an API's headers wait for its first token
            time.sleep(server.prefill_s)
            header = int((time.perf_counter() - arrived) * 1000)
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        if header is not None:
            self.send_header(PROCESSING_HEADER, str(header))
        self.end_headers()
        progress = {"total": 100, "cache": 0, "processed": 0, "time_ms": 0}
        if header is None:
            self._write(_delta(None, prompt_progress=progress))
            time.sleep(server.prefill_s)
        prompt_ms = (time.perf_counter() - started) * 1000
        if header is None:
            self._write(_delta(None, prompt_progress={**progress, "processed": 100, "time_ms": int(prompt_ms)}))
        first = time.perf_counter()
        for index in range(tokens):
            if index:
                time.sleep(server.token_s)
            self._write(_delta(f" w{index}"))
        timings = {"cache_n": 0, "prompt_n": 100, "prompt_ms": prompt_ms, "predicted_n": tokens,
                   "predicted_ms": (time.perf_counter() - first) * 1000}
        self._write(_delta(None, "length"))
        self._write(_data({"choices": [], "usage": {"prompt_tokens": 100, "completion_tokens": tokens},
                           **({} if header is not None else {"timings": timings})}))
        self._write(b"data: [DONE]\n\n")
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()
        return header


class OneSlotServer(ThreadingHTTPServer):
    """One slot, first come first served; ``prefill_s`` before the first token, ``token_s`` between tokens."""

    daemon_threads = True
    request_queue_size = 128

    def __init__(self, prefill_s: float = 0.05, token_s: float = 0.01, processing_header: bool = False) -> None:
        super().__init__(("127.0.0.1", 0), Handler)
        self.prefill_s, self.token_s, self.processing_header = prefill_s, token_s, processing_header
        self.turn = threading.Condition()
        self.tickets = self.serving = 0
        self.served: dict[str, tuple[float, float, float, int | None]] = {}  # tag -> (arrived, started, released,
        # the processing header sent)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def handle_error(self, request: Any, client_address: Any) -> None:
        """Quiet about resets: a client closes the keep-alive connections its pool does not keep."""
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


class SlotProcess:
    """`OneSlotServer` in a process of its own, started and ready (its ``ready`` line read) inside ``with``."""

    def __init__(self, prefill_s: float = 0.05, token_s: float = 0.01, processing_header: bool = False) -> None:
        self.argv = [sys.executable, "-m", "tests.support.fake_slot", "--prefill-s", str(prefill_s),
                     "--token-s", str(token_s), *(["--processing-header"] if processing_header else [])]
        self.url = ""

    def __enter__(self) -> SlotProcess:
        self.process = subprocess.Popen(self.argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                        cwd=ROOT)
        assert self.process.stdout is not None
        with selectors.DefaultSelector() as ready:
            ready.register(self.process.stdout, selectors.EVENT_READ)
            line = self.process.stdout.readline() if ready.select(READY_S) else ""
        if not line.startswith("ready "):
            self.__exit__()
            raise RuntimeError(f"the one-slot fake did not start: {line!r} {self.process.stderr.read()!r}")  # type: ignore[union-attr]
        self.url = line.split()[1]
        return self

    def served(self) -> dict[str, tuple[float, float, float, int | None]]:
        """Each request's (arrived, started, released, header) as the fake timed them, by tag."""
        found = httpx.get(f"{self.url}/served", timeout=10.0).json()["served"]
        return {tag: tuple(times) for tag, times in found.items()}

    def __exit__(self, *exc: object) -> None:
        self.process.terminate()
        self.process.communicate(timeout=30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--prefill-s", type=float, default=0.05)
    parser.add_argument("--token-s", type=float, default=0.01)
    parser.add_argument("--processing-header", action="store_true")
    args = parser.parse_args()
    server = OneSlotServer(args.prefill_s, args.token_s, args.processing_header)
    print(f"ready {server.url}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
