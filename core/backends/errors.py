"""Readable messages for a request that failed before or instead of a stream: `Sentence`s from ``[backend_error]``,
the server's own words kept as a value."""

from __future__ import annotations

from typing import Any

import httpx

from core.words import Sentence


def error_text(body: Any) -> str:
    """The human part of an error body: ``error.message`` when there is one."""
    if isinstance(body, dict):
        err = body.get("error", body)
        if isinstance(err, dict):
            return str(err.get("message") or err)[:300]
        return str(err)[:300]
    return str(body)[:300]


def _body_text(response: httpx.Response) -> str:
    try:
        return error_text(response.json())
    except (ValueError, UnicodeDecodeError):
        return response.text[:300].strip()


HTTP_HINTS = {400: "backend_error.http_400", 401: "backend_error.http_401", 403: "backend_error.http_403",
              404: "backend_error.http_404", 408: "backend_error.http_408", 413: "backend_error.http_413",
              429: "backend_error.http_429"}  # what the status usually means


def http_error_message(response: httpx.Response, model: str) -> str:
    """A 4xx or 5xx answer: what the status usually means, and the server's own words quoted."""
    status = response.status_code
    hint = Sentence(HTTP_HINTS.get(status, "backend_error.http_5xx" if status >= 500 else "backend_error.http_other"),
                    model=model)
    retry_after = response.headers.get("retry-after")
    message = (Sentence("backend_error.http_retry", status=status, hint=hint, retry_after=retry_after)
               if status == 429 and retry_after else Sentence("backend_error.http", status=status, hint=hint))
    body = _body_text(response)
    if status == 400 and "stream" in body.lower():
        message = Sentence("backend_error.cannot_stream", model=model)
    return Sentence("backend_error.server_said", message=message, body=body) if body else message


def not_streaming_message(response: httpx.Response, model: str) -> str:
    kind = response.headers.get("content-type") or Sentence("backend_error.no_content_type")
    return Sentence("backend_error.not_streaming", model=model, kind=kind)


def redirect_message(response: httpx.Response) -> str:
    """A 3xx answer: where it points, without following it (the key would go along)."""
    location = response.headers.get("location", "")
    where = str(response.url.join(location)) if location else Sentence("backend_error.no_location")
    return Sentence("backend_error.redirect", status=response.status_code, where=where)
