"""Readable messages for a request that failed before or instead of a stream."""

from __future__ import annotations

from typing import Any

import httpx


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


HTTP_HINTS = {
    400: "the server refused the request",
    401: "the API key was rejected (missing, wrong, or for another provider)",
    403: "the API key may not use this model or endpoint",
    404: "the model or the endpoint does not exist at this base URL",
    408: "the server timed out waiting for the request",
    413: "the prompt is too large for this server",
    429: "rate limited or out of quota",
}


def http_error_message(response: httpx.Response, model: str) -> str:
    status = response.status_code
    hint = HTTP_HINTS.get(status, "the server failed" if status >= 500 else "the request failed")
    if status == 404:
        hint = f"model '{model}' or the endpoint does not exist at this base URL"
    message = f"HTTP {status}: {hint}."
    retry_after = response.headers.get("retry-after")
    if status == 429 and retry_after:
        message += f" The server asks to retry after {retry_after} s."
    body = _body_text(response)
    if status == 400 and "stream" in body.lower():
        message = f"HTTP 400: model '{model}' cannot stream on this server; pick a model that streams."
    return f"{message} Server said: {body}" if body else message


def not_streaming_message(response: httpx.Response, model: str) -> str:
    kind = response.headers.get("content-type", "no content type") or "no content type"
    return (f"Model '{model}' answered with one complete response ({kind}) instead of a stream: "
            "it cannot stream here, so time to first token cannot be measured. Pick a model that streams.")


def redirect_message(response: httpx.Response) -> str:
    """A 3xx answer: where it points, without following it (the key would go along)."""
    location = response.headers.get("location", "")
    where = str(response.url.join(location)) if location else "no Location given"
    return (f"HTTP {response.status_code}: the API redirects to {where} (not followed: the request and its key "
            "would go there). Check the base URL; if the new address is right, use it as the base URL.")
