"""What the capture proxy writes: the JSONL log, and what it reads from each response as it passes.

One line per call::

    {"request": <the body as sent>, "response": {"status", "usage", "timings", "ttft_ms", "total_ms",
     "error"}, "endpoint": "/v1/chat/completions", "time": "<UTC ISO 8601>"}

``usage`` is the provider's own object (Anthropic's ``message_start`` and ``message_delta`` merged),
``null`` when it sent none; ``timings`` is llama-server's, present only when sent; ``ttft_ms`` is the
first generated token (text, reasoning or a tool call) in a stream, the first body byte otherwise;
``error`` is present only when the upstream failed or the stream was cut. No header is logged, and
every key the request carried (auth headers, key query parameters) is removed from the line.
"""

from __future__ import annotations

import json
import re
import threading
import time
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl

from core.secrets import redact

SECRET_NAME = re.compile(r"auth|key|token|secret|sig", re.IGNORECASE)
MAX_PARSED_BODY = 32 * 1024 * 1024  # a non-streaming answer larger than this is passed on but not read for usage


def secrets_of(headers: list[tuple[str, str]], query: str) -> list[str]:
    """Every value a request may carry a key in: auth-like headers (and their token part), key-like parameters."""
    values = [value for name, value in headers if SECRET_NAME.search(name)]
    values += [value for name, value in parse_qsl(query) if SECRET_NAME.search(name)]
    values += [part for value in values for part in value.split() if len(part) >= 8]
    return sorted(values, key=len, reverse=True)


class CaptureLog:
    """An append-only JSONL file; one whole line per call, written under a lock and flushed."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.count = 0
        self._lock = threading.Lock()
        self._file = path.open("a", encoding="utf-8")

    def append(self, record: dict[str, Any], secrets: list[str]) -> None:
        line = json.dumps(scrub(record, secrets), ensure_ascii=False)
        with self._lock:
            if self._file.closed:
                return  # a call still in flight when the proxy stopped
            self._file.write(line + "\n")
            self._file.flush()
            self.count += 1

    def close(self) -> None:
        with self._lock:
            self._file.close()


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
        self._pending = b""
        self._body = bytearray()

    def feed(self, data: bytes) -> None:
        now = time.perf_counter()
        self.first_byte = self.first_byte or now
        if not self.streaming:
            if len(self._body) + len(data) <= MAX_PARSED_BODY:
                self._body += data
            return
        lines = (self._pending + data).split(b"\n")
        self._pending = lines.pop()
        for line in lines:
            line = line.strip()
            if line.startswith(b"data:") and line[5:].strip() != b"[DONE]":
                self._event(line[5:].strip(), now)

    def _event(self, payload: bytes, now: float) -> None:
        try:
            event = json.loads(payload)
        except ValueError:
            return  # passed on unchanged; the agent sees the same malformed chunk
        if not isinstance(event, dict):
            return
        if self.first_token is None and _carries_token(event):
            self.first_token = now
        self._read(event)

    def _read(self, body: dict[str, Any]) -> None:
        nested = [body, body.get("message"), body.get("response"), body.get("x_groq")]
        nested += [choice for choice in body.get("choices") or [] if isinstance(choice, dict)]
        for part in nested:
            if isinstance(part, dict) and isinstance(part.get("usage"), dict):
                merged = dict(self.usage or {})
                merged.update({k: v for k, v in part["usage"].items() if v is not None})
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
            except ValueError:
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
