"""Capture what your agent sends: a pass-through proxy that logs each LLM request for the cache doctor.

``python -m core capture --upstream https://api.openai.com --out agent_log.jsonl`` serves on
127.0.0.1:8089; point the agent's base URL at it, work as usual, stop with Ctrl-C, then run
``python -m core doctor agent_log.jsonl``. Keys pass through to the upstream and are never logged.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any

from core.capture.proxy import CaptureServer

DEFAULT_PORT = 8089


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--upstream", required=True,
                        help="the real API's base URL, e.g. https://api.openai.com or https://api.anthropic.com")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT,
                        help=f"port to listen on (default {DEFAULT_PORT}; 0: any free port)")
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    parser.add_argument("--out", type=Path, required=True, help="the JSONL log to append to")


def run(args: argparse.Namespace) -> int:
    try:
        server = CaptureServer(args.upstream, args.out, args.host, args.port, echo=True)
    except (ValueError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    base = server.base_url
    print(f"Capturing {server.upstream} into {args.out.resolve()} (appending).\n"
          f"Point your agent here:\n"
          f"  OpenAI-compatible base URL: {base}/v1   (e.g. OPENAI_BASE_URL={base}/v1)\n"
          f"  Anthropic base URL:         {base}      (e.g. ANTHROPIC_BASE_URL={base})\n"
          f"Ctrl-C stops; then: python -m core doctor {args.out}", flush=True)
    previous = stop_on_ctrl_c(server)
    try:
        server.serve_forever()
    except KeyboardInterrupt:  # a second Ctrl-C: stop at once
        pass
    finally:
        if previous is not None:
            signal.signal(signal.SIGINT, previous)
        server.server_close()
    unfinished, failed, gone = server.in_flight.count, server.log.failed, server.gone
    print(f"Stopped; calls logged: {server.log.count}, in {args.out}."
          + (f" {gone} of them after the agent had gone (client_gone: it did not see the whole answer)."
             if gone else "")
          + (f" {failed} could not be written (see above)." if failed else "")
          + (f" {unfinished} still in flight were not logged." if unfinished else ""), flush=True)
    return 0


def stop_on_ctrl_c(server: CaptureServer) -> signal.Handlers | Callable[[int, FrameType | None], Any] | int | None:
    """Ctrl-C ends `serve_forever` between requests (its `shutdown`, from another thread), never as a
    KeyboardInterrupt inside socketserver: one raised while it was still starting a call's thread closed that
    call's connection mid-answer (socketserver's bare ``except``). A second Ctrl-C interrupts as usual."""
    if threading.current_thread() is not threading.main_thread():
        return None

    def stop(signum: int, frame: FrameType | None) -> None:
        signal.signal(signal.SIGINT, signal.default_int_handler)
        threading.Thread(target=server.shutdown, daemon=True).start()

    return signal.signal(signal.SIGINT, stop)  # the handler it replaces, put back when serving ends
