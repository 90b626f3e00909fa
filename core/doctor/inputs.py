"""Reading the doctor's input: JSONL logs (a body or a request/response wrapper per line), JSON arrays,
one text file per round, or one system prompt. Every line that cannot be read is named, never skipped silently."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from core.doctor.diagnostics import provider_diagnosis
from core.doctor.formats import decide, read_body
from core.doctor.model import Measured, Round, Transcript, TranscriptError, text_round
from core.experiments.prompts import DocumentError, read_document

MAX_DOCTOR_BYTES = 50 * 1024 * 1024
REQUEST_KEYS = ("request", "request_body", "req")
RESPONSE_KEYS = ("response", "response_body", "resp")
TIME_KEYS = ("time", "timestamp", "created_at", "start_time", "startTime")


def _get(data: Any, *path: str) -> Any:
    for key in path:
        data = data.get(key) if isinstance(data, dict) else None
    return data


def measured(response: Any) -> Measured | None:
    """Cached and prompt tokens from a response (or its ``body``) in any provider's usage shape."""
    if not isinstance(response, dict):
        return None
    if isinstance(response.get("body"), dict):
        response = response["body"]
    usage = response.get("usage") if isinstance(response.get("usage"), dict) else response
    if isinstance(_get(response, "usageMetadata"), dict):
        meta = response["usageMetadata"]
        cached = int(meta.get("cachedContentTokenCount") or 0)
        return Measured(meta.get("promptTokenCount"), cached, "cachedContentTokenCount")
    if "cache_read_input_tokens" in usage or "cache_creation_input_tokens" in usage:
        read, write = int(usage.get("cache_read_input_tokens") or 0), int(usage.get("cache_creation_input_tokens") or 0)
        return Measured(int(usage.get("input_tokens") or 0) + read + write, read, "cache_read_input_tokens")
    if "prompt_cache_hit_tokens" in usage:
        hit = int(usage["prompt_cache_hit_tokens"] or 0)
        return Measured(hit + int(usage.get("prompt_cache_miss_tokens") or 0), hit, "prompt_cache_hit_tokens")
    for details, total in (("prompt_tokens_details", "prompt_tokens"), ("input_tokens_details", "input_tokens")):
        cached = _get(usage, details, "cached_tokens")
        if cached is not None or (details in usage and total in usage):
            return Measured(usage.get(total), int(cached or 0), "cached_tokens")
    for field in ("cached_tokens", "num_cached_tokens"):  # SGLang and Moonshot; Mistral
        if field in usage:
            return Measured(usage.get("prompt_tokens"), int(usage[field] or 0), field)
    timings = response.get("timings")
    if isinstance(timings, dict) and "cache_n" in timings:
        reused = int(timings["cache_n"])
        return Measured(int(timings.get("prompt_n", 0)) + reused, reused, "timings.cache_n")
    return None


def _time(line: dict[str, Any]) -> datetime | None:
    """When the request was sent (epoch seconds or milliseconds, or ISO 8601; UTC when no zone is given)."""
    for key in TIME_KEYS:
        value = line.get(key)
        try:
            if isinstance(value, (int, float)):
                return datetime.fromtimestamp(value / 1000 if value > 1e11 else value, timezone.utc)
            if isinstance(value, str):
                moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
                return moment if moment.tzinfo else moment.replace(tzinfo=timezone.utc)
        except (ValueError, OverflowError, OSError):
            continue
    return None


def _unwrap(data: Any) -> tuple[Any, str, Any, Any]:
    """A log entry as (request body, endpoint, response, the entry itself): a bare body, or a wrapper."""
    request_key = next((k for k in REQUEST_KEYS if isinstance(data, dict) and isinstance(data.get(k), dict)), None)
    if request_key is None:
        return data, "", None, None
    request = data[request_key]
    if isinstance(request.get("body"), dict):  # gateway exports: {"request": {"url": ..., "body": {...}}}
        request = {**request["body"], **({"model": request["model"]} if "model" in request else {})}
    endpoint = str(data.get("endpoint") or data.get("url") or data.get("path") or _get(data, request_key, "url") or "")
    response = next((data[k] for k in RESPONSE_KEYS if k in data), None)
    return request, endpoint, response, data


def read_line(data: Any, where: str, fmt: str | None = None) -> Round:
    """One log entry: a bare request body, or a wrapper holding the request with its response."""
    request, endpoint, response, wrapper = _unwrap(data)
    round_ = read_body(request, where, endpoint, fmt)
    if wrapper is not None:
        round_.measured = measured(response) or measured(wrapper.get("usage") and {"usage": wrapper["usage"]})
        round_.diagnosis = provider_diagnosis(response)
        round_.time = _time(wrapper)
    return round_


def _read_items(items: Sequence[tuple[str, Any]], kind: str, fmt: str | None = None) -> Transcript:
    """Every entry read, in the format decided for the whole log (`formats.decide`), or ``fmt`` when forced."""
    formats, mixed = decide([_unwrap(data)[:2] for _, data in items], fmt)
    rounds, errors = [], []
    for (where, data), line_format in zip(items, formats, strict=True):
        try:
            rounds.append(read_line(data, where, line_format))
        except ValueError as exc:
            message = str(exc)
            errors.append(message if message.startswith(where) else f"{where}: {message}")
    notes = [f"{r.source}: previous_response_id: the history lives on the server and cannot be checked; "
             "only what this body adds is compared" for r in rounds if r.server_history]
    return Transcript(rounds, errors, kind, notes, mixed)


def parse_jsonl(text: str, name: str = "input", fmt: str | None = None) -> Transcript:
    items, errors = [], []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            items.append((f"{name} line {number}", json.loads(line)))
        except json.JSONDecodeError as exc:
            errors.append(f"{name} line {number}: not valid JSON ({exc.msg} at column {exc.colno})")
    transcript = _read_items(items, "jsonl", fmt)
    transcript.errors = sorted(errors + transcript.errors, key=_line_number)
    return transcript


def _line_number(error: str) -> int:
    digits = error.split(" line ", 1)[-1].split(":", 1)[0]
    return int(digits) if digits.isdigit() else 0


def parse_json_array(text: str, name: str = "input", fmt: str | None = None) -> Transcript:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        where = f"line {exc.lineno}, column {exc.colno}"
        raise TranscriptError(f"{name} is not valid JSON ({exc.msg} at {where}).") from None
    if isinstance(data, dict) and isinstance(data.get("requests"), list):
        data = data["requests"]
    if isinstance(data, dict):
        data = [data]
    if not isinstance(data, list):
        raise TranscriptError(f"{name}: expected a JSON array of request bodies.")
    return _read_items([(f"{name} item {i + 1}", body) for i, body in enumerate(data)], "json", fmt)


LOG_SUFFIXES = (".jsonl", ".json", ".ndjson", ".log")  # names that promise JSON: never read as a prompt

def load_inputs(files: Sequence[tuple[str, bytes]], max_bytes: int = MAX_DOCTOR_BYTES,
                fmt: str | None = None) -> Transcript:
    """Read uploaded or named files: one JSONL/JSON log, several text files (one per round, in name
    order), or one plain text file (a system prompt to compare strategies with). ``fmt`` forces the
    format of every line of a log (`formats.FORMATS`); by default it is decided for the whole log."""
    if not files:
        raise TranscriptError("No input: upload a JSONL log, a JSON array, or text files.")
    if sum(len(data) for _, data in files) > max_bytes:
        raise TranscriptError(f"The input is larger than {max_bytes / 1e6:.0f} MB.")
    texts = []
    for name, data in sorted(files, key=lambda f: f[0]):
        try:
            texts.append((name, read_document(data, name, max_bytes)))
        except DocumentError as exc:
            raise TranscriptError(str(exc)) from None
    if len(texts) > 1:
        if any(t.lstrip().startswith(("{", "[")) for _, t in texts):
            raise TranscriptError("Give one JSON or JSONL log at a time (or several text files, one per round).")
        return Transcript([text_round("user", text, name) for name, text in texts], [], "files")
    name, text = texts[0]
    stripped = text.lstrip()
    if name.lower().endswith(LOG_SUFFIXES) and not stripped.startswith(("{", "[")):
        first = stripped.splitlines()[0][:80] if stripped else ""
        raise TranscriptError(f"{name} line 1: expected a JSON request body (one per line, starting with {{) or a "
                              f"JSON array, got {first!r}. Strip any prefix a logger adds before each body.")
    if stripped.startswith("["):
        return parse_json_array(text, name, fmt)
    if stripped.startswith("{"):
        transcript = parse_jsonl(text, name, fmt)
        if transcript.rounds or not name.endswith(".json"):
            return transcript
        return parse_json_array(text, name, fmt)
    return Transcript([text_round("system", text, name)], [], "system_prompt")


def load_paths(paths: Sequence[Path], fmt: str | None = None) -> Transcript:
    return load_inputs([(p.name, p.read_bytes()) for p in paths], fmt=fmt)
