"""What the capture proxy writes: the JSONL log, and what it reads from each response as it passes.

One line per call::

    {"request": <the body as sent>, "response": {"status", "usage", "timings", "ttft_ms", "total_ms",
     "error"}, "endpoint": "/v1/chat/completions", "time": "<UTC ISO 8601>"}

``usage`` is the provider's own object (Anthropic's ``message_start`` and ``message_delta`` merged),
``null`` when it sent none; ``timings`` is llama-server's, present only when sent; ``ttft_ms`` is the
first generated token (text, reasoning or a tool call) in a stream, the first body byte otherwise;
``error`` is present only when the upstream failed, the stream was cut or the agent left; ``client_gone``
(``true``) only when the agent disconnected before the whole answer was passed on. No header is logged, and
every key the request carried (auth headers, key query parameters) is removed from the line. A body
too deeply nested to parse is kept as text, with ``request_error`` saying so.

The log stays readable whatever happens to the proxy or the disk: each record is one ``write`` of
the whole line to a file opened with ``O_APPEND`` (no buffer in this process: what was written is in
the file; a ``kill -9`` can cut only the line being written, as Linux ends a write early for a fatal
signal); a write that fails (disk full) is reported with how much of it reached the file, and the
next record starts on a fresh line, as does the first record after a line an earlier crash cut.
A log deleted or rotated (moved away) under the proxy is noticed before the next write, and a new
file is started at the same path.
"""

from __future__ import annotations

import json
import os
import re
import threading
import time
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl

from core.backends.sse import SSELineSplitter
from core.backends.usage import find_usage
from core.secrets import redact

SECRET_NAME = re.compile(r"auth|key|token|secret|sig", re.IGNORECASE)
MAX_PARSED_BODY = 32 * 1024 * 1024  # a non-streaming answer larger than this is passed on but not read for usage
TOO_DEEP = object()  # a request body that could not be parsed: nested deeper than Python's recursion limit
TOO_DEEP_NOTE = "the body is nested too deeply to parse; it was forwarded unchanged and is kept here as text"


def secrets_of(headers: list[tuple[str, str]], query: str) -> list[str]:
    """Every value a request may carry a key in: auth-like headers (and their token part), key-like parameters."""
    values = [value for name, value in headers if SECRET_NAME.search(name)]
    values += [value for name, value in parse_qsl(query) if SECRET_NAME.search(name)]
    values += [part for value in values for part in value.split() if len(part) >= 8]
    return sorted(values, key=len, reverse=True)


class CaptureLog:
    """An append-only JSONL file, one whole line per call (see the module's docstring)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.count = 0  # records written whole
        self.failed = 0  # records that could not be written
        self._lock = threading.Lock()
        self._fd: int | None = None
        self._open()
        self._cut = self._ends_mid_line()  # the next record must start on a fresh line

    def _open(self) -> None:
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        info = os.fstat(self._fd)
        self._identity = (info.st_dev, info.st_ino)

    def _ends_mid_line(self) -> bool:
        try:
            with self.path.open("rb") as handle:
                if handle.seek(0, os.SEEK_END) == 0:
                    return False
                handle.seek(-1, os.SEEK_END)
                return handle.read(1) != b"\n"
        except OSError:  # not seekable (a pipe, /dev/full): nothing to continue
            return False

    def _moved(self) -> str:
        """A note when the file at ``path`` is no longer the one open (deleted or rotated): then reopen."""
        try:
            info = os.stat(self.path)
            if (info.st_dev, info.st_ino) == self._identity:
                return ""
        except FileNotFoundError:
            pass
        if self._fd is not None:
            os.close(self._fd)
        self._open()
        self._cut = False
        return f"; {self.path} had been deleted or moved away, so a new one was started"

    def _line(self, record: dict[str, Any], secrets: list[str], body: bytes) -> bytes:
        if record.get("request") is not TOO_DEEP:
            try:
                return (json.dumps(scrub(record, secrets), ensure_ascii=False) + "\n").encode()
            except RecursionError:  # parsed, but too deep to walk again
                pass
        text = body.decode("utf-8", "replace")
        record = {**record, "request": text, "request_error": TOO_DEEP_NOTE}
        return (json.dumps(scrub(record, secrets), ensure_ascii=False) + "\n").encode()

    def append(self, record: dict[str, Any], secrets: list[str], body: bytes = b"") -> str:
        """Write one record; return what happened, in words ("logged", or why not and what reached the file)."""
        data = self._line(record, secrets, body)
        with self._lock:
            if self._fd is None:
                return "not logged: the proxy had stopped"  # a call still in flight when the proxy stopped
            try:
                note = self._moved()
            except OSError as exc:
                self.failed += 1
                return f"NOT logged: cannot reopen {self.path}: {exc.strerror or exc}"
            if self._cut:
                data = b"\n" + data
            written = 0
            try:
                while written < len(data):
                    written += os.write(self._fd, data[written:])
            except OSError as exc:
                self.failed += 1
                self._cut = True
                return (f"NOT logged: writing {self.path} failed ({exc.strerror or exc}) after {written:,} of "
                        f"{len(data):,} bytes; the next record starts on a new line")
            self._cut = False
            self.count += 1
            return "logged" + note

    def close(self) -> None:
        with self._lock:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None


class ResponseWatcher:
    """Reads the upstream's bytes as they pass by: usage, timings, the first token, an error."""

    def __init__(self, started: float) -> None:
        self.started = started
        self.streaming = False
        self.usage: dict[str, Any] | None = None
        self.timings: dict[str, Any] | None = None
        self.first_token: float | None = None
        self.first_byte: float | None = None
        self.error: str | None = None
        self._lines = SSELineSplitter()
        self._body = bytearray()

    def feed(self, data: bytes) -> None:
        now = time.perf_counter()
        self.first_byte = self.first_byte or now
        if not self.streaming:
            if len(self._body) + len(data) <= MAX_PARSED_BODY:
                self._body += data
            return
        for line in self._lines.feed(data):
            if line is None:
                self.error = "a stream line longer than the SSE line cap was passed on but not read"
            elif line.startswith("data:") and line[5:].strip() not in ("", "[DONE]"):
                self._event(line[5:].strip(), now)

    def _event(self, payload: str, now: float) -> None:
        try:
            event = json.loads(payload)
        except (ValueError, RecursionError):
            return  # passed on unchanged; the agent sees the same malformed chunk
        if not isinstance(event, dict):
            return
        if self.first_token is None and _carries_token(event):
            self.first_token = now
        self._read(event)

    def _read(self, body: dict[str, Any]) -> None:
        for _, usage in find_usage(body):  # the provider's own object, kept as sent; the doctor reads it
            merged = dict(self.usage or {})
            merged.update({k: v for k, v in usage.items() if v is not None})
            self.usage = merged
        if isinstance(body.get("timings"), dict):
            self.timings = body["timings"]
        response = body.get("response")
        error = body.get("error") or (response.get("error") if isinstance(response, dict) else None)
        if error:
            self.error = _error_text(error)

    def result(self, status: int, error: str | None = None) -> dict[str, Any]:
        """The log's ``response`` object; reads a non-streaming body now that it is complete."""
        if not self.streaming and self._body:
            try:
                body = json.loads(self._body)
            except (ValueError, RecursionError):
                body = None
            if isinstance(body, dict):
                self._read(body)
            elif status >= 400:
                self.error = self._body[:300].decode("utf-8", "replace")
        if error is None:  # not the proxy's own: what the upstream said, if anything
            error = self.error
            if status >= 400:
                error = f"upstream answered {status}" + (f": {error}" if error else "")
        first = None if status >= 400 else self.first_token if self.streaming else self.first_byte
        record: dict[str, Any] = {"status": status, "usage": self.usage}
        if self.timings is not None:
            record["timings"] = self.timings
        record["ttft_ms"] = round((first - self.started) * 1000, 1) if first else None
        record["total_ms"] = round((time.perf_counter() - self.started) * 1000, 1)
        if error:
            record["error"] = error
        return record


def scrub(value: Any, secrets: list[str]) -> Any:
    """``value`` with every secret removed from every string in it, keys included (longest secrets first)."""
    if isinstance(value, str):
        return redact(value, *secrets)
    if isinstance(value, dict):
        return {scrub(k, secrets): scrub(v, secrets) for k, v in value.items()}
    if isinstance(value, list):
        return [scrub(item, secrets) for item in value]
    return value


def _carries_token(event: dict[str, Any]) -> bool:
    """Whether a stream event holds generated text, reasoning or a tool call (any of the supported APIs)."""
    kind = str(event.get("type", ""))
    if kind == "content_block_delta" or (kind.startswith("response.") and kind.endswith(".delta")):
        return True
    for choice in event.get("choices") or []:
        if not isinstance(choice, dict):
            continue
        delta = choice.get("delta")
        delta = delta if isinstance(delta, dict) else {}
        if choice.get("text") or any(delta.get(k) for k in ("content", "reasoning_content", "reasoning", "tool_calls")):
            return True
    return False


def _error_text(error: Any) -> str:
    if isinstance(error, dict):
        return str(error.get("message") or error.get("type") or json.dumps(error))
    return str(error)
