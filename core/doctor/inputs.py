"""Reading the doctor's input: JSONL logs (a body or a request/response wrapper per line), JSON arrays,
one text file per round, or one system prompt; traces of every tool `traces` and `exports` read, and Phoenix's spans
dataframe saved as Parquet (`parquet`). Every line that cannot be read is named, never skipped silently.

Each file is read once, in bounded pieces, and refused as soon as it passes `MAX_DOCTOR_BYTES` (so
``/dev/zero`` costs 50 MB, not all memory), which also makes a FIFO or ``doctor <(zcat log.gz)`` work.
A gzip file is decompressed (to the same bound, so a small bomb cannot fill memory), UTF-16 with a
byte-order mark is decoded (and said so in a note), UTF-16 without one is named. One line never ends
the run: a line nested too deeply for Python, a count that is not a count (``1e999999``, ``"12"``,
``[1]``, ``true``, ``-3``) or counts that contradict each other (more cached than prompt tokens) is
named with its line; the rest is analysed.
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from core.backends.usage import find_usage, read_timings, read_usage
from core.doctor import exports, parquet, traces
from core.doctor.diagnostics import provider_diagnosis
from core.doctor.formats import decide, read_body
from core.doctor.model import Measured, Round, Transcript, TranscriptError, json_problem, text_round
from core.doctor.rules import served_by
from core.documents import DocumentError, read_document
from core.words import Sentence, said

MAX_DOCTOR_BYTES = 50 * 1024 * 1024
READ_CHUNK = 1024 * 1024
GZIP_MAGIC = b"\x1f\x8b"
UTF16_BOMS = (b"\xff\xfe", b"\xfe\xff")
REQUEST_KEYS = ("request", "request_body", "req")
RESPONSE_KEYS = ("response", "response_body", "resp")
TIME_KEYS = ("time", "timestamp", "created_at", "start_time", "startTime")


def _get(data: Any, *path: str) -> Any:
    for key in path:
        data = data.get(key) if isinstance(data, dict) else None
    return data


def measured(response: Any) -> tuple[Measured | None, list[str]]:
    """Cached and prompt tokens from a response (or its ``body``) in any provider's usage shape
    (`core.backends.usage`), and what in it could not be used."""
    if not isinstance(response, Mapping):
        return None, []
    if isinstance(response.get("body"), Mapping):
        response = response["body"]
    if isinstance(response.get("usageMetadata"), Mapping):
        found = [("usageMetadata", response)]
    else:
        found = [(where, usage) for where, usage in find_usage(response) if where == "usage"]
        found = found or [("usage", response)]  # a bare usage object
    where, data = found[0]
    usage = read_usage(data, "response." + where)
    details = [data[d] for d in ("prompt_tokens_details", "input_tokens_details") if isinstance(data.get(d), Mapping)]
    if (usage.cached_tokens is None and details and usage.prompt_tokens is not None
            and all(d.get("cached_tokens") is None for d in details)):
        usage.cached_tokens, usage.source = 0, "cached_tokens"  # the details say nothing was cached
    # a cached count that is there but unreadable ("1152", [1152]) is unknown, never 0: no verdict is made from it
    timings = response.get("timings")
    if usage.cached_tokens is None and isinstance(timings, Mapping) and "cache_n" in timings:
        usage = read_timings(timings, "response.timings")
    problems = list(usage.unreadable)
    impossible = usage.impossible()
    if impossible:
        problems.append(Sentence("doctor_input_refused.not_used", why=impossible))
    if usage.cached_tokens is None or impossible:
        return None, problems
    source = usage.source.rsplit(".", 1)[-1] if usage.source != "timings.cache_n" else usage.source
    return Measured(usage.prompt_tokens, usage.cached_tokens, source), problems


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


def read_line(data: Any, where: str, fmt: str | None = None) -> tuple[Round, list[str]]:
    """One log entry: a bare request body, or a wrapper holding the request with its response; and what
    in its usage could not be used."""
    if isinstance(data, dict) and isinstance(data.get("request_error"), str):  # the capture proxy's own note
        raise ValueError(Sentence("doctor_input_refused.capture_error", error=data["request_error"]))
    request, endpoint, response, wrapper = _unwrap(data)
    round_ = read_body(request, where, endpoint, fmt)
    problems: list[str] = []
    if wrapper is not None:
        round_.measured, problems = measured(response)
        if round_.measured is None and not problems and isinstance(wrapper.get("usage"), Mapping):
            round_.measured, problems = measured({"usage": wrapper["usage"]})
        round_.diagnosis = provider_diagnosis(response)
        round_.served_by = served_by(response, wrapper.get("headers") or wrapper.get("response_headers"))
        round_.time = _time(wrapper)
    return round_, problems


def _read_items(items: Sequence[tuple[str, Any]], kind: str, fmt: str | None = None) -> Transcript:
    """Every entry read, in the format decided for the whole log (`formats.decide`), or ``fmt`` when forced."""
    formats, mixed = decide([_unwrap(data)[:2] for _, data in items], fmt)
    rounds: list[Round] = []
    errors: list[str] = []
    unused: list[str] = []
    for (where, data), line_format in zip(items, formats, strict=True):
        try:
            round_, problems = read_line(data, where, line_format)
        except ValueError as exc:
            message = said(exc)
            errors.append(message if message.startswith(where) else Sentence("doctor_read.at", where=where,
                                                                               problem=message))
            continue
        except RecursionError:
            errors.append(Sentence("doctor_input_refused.too_deep_line", where=where))
            continue
        except Exception as exc:  # noqa: BLE001 - one unreadable line is named, never the end of the run
            errors.append(Sentence("doctor_input_refused.unreadable", where=where, kind=type(exc).__name__,
                                   error=str(exc)))
            continue
        rounds.append(round_)
        unused += [Sentence("doctor_read.at", where=where, problem=problem) for problem in problems]
    notes: list[str] = [Sentence("doctor_read.server_history", source=r.source) for r in rounds if r.server_history]
    return Transcript(rounds, errors, kind, notes, mixed, unused)


def _objects_once(twice: list[str]) -> Callable[[list[tuple[str, Any]]], dict[str, Any]]:
    """A JSON object hook that notes each key given twice in one object (JSON keeps the last, silently)."""
    def hook(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        found = dict(pairs)
        if len(found) != len(pairs):
            seen: set[str] = set()
            twice.extend(key for key, _ in pairs if key in seen or seen.add(key))  # type: ignore[func-returns-value]
        return found
    return hook


def parse_jsonl(text: str, name: str = "input", fmt: str | None = None) -> Transcript:
    items: list[tuple[str, Any]] = []
    errors: list[str] = []
    unused: list[str] = []
    twice: list[str] = []
    decoder = json.JSONDecoder(object_pairs_hook=_objects_once(twice))
    for number, line in enumerate(text.split("\n"), start=1):  # not splitlines: U+2028 may sit inside a string
        if not line.strip():
            continue
        try:
            items.append((f"{name} line {number}", decoder.decode(line)))
        except json.JSONDecodeError as exc:
            errors.append(Sentence("doctor_read.not_json_line", where=f"{name} line {number}",
                                   problem=json_problem(exc)))
        except RecursionError:
            errors.append(Sentence("doctor_input_refused.too_deep_line", where=f"{name} line {number}"))
        if twice:
            unused += [Sentence("doctor_input_refused.given_twice", where=f"{name} line {number}", name=repr(key))
                       for key in dict.fromkeys(twice)]
            twice.clear()
    transcript = _read_items(items, "jsonl", fmt)
    transcript.errors = sorted(errors + transcript.errors, key=_line_number)
    transcript.unused = sorted(unused + transcript.unused, key=_line_number)
    return transcript


def _line_number(error: str) -> int:
    digits = error.split(" line ", 1)[-1].split(":", 1)[0]
    return int(digits) if digits.isdigit() else 0


def parse_json_array(text: str, name: str = "input", fmt: str | None = None) -> Transcript:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise TranscriptError(Sentence("doctor_read.not_json_file", name=name, msg=exc.msg, line=exc.lineno,
                                       column=exc.colno)) from None
    except RecursionError:
        raise TranscriptError(Sentence("doctor_input_refused.too_deep_file", name=name)) from None
    if isinstance(data, dict) and isinstance(data.get("requests"), list):
        data = data["requests"]
    if isinstance(data, dict):
        data = [data]
    if not isinstance(data, list):
        raise TranscriptError(Sentence("doctor_input_refused.not_array", name=name))
    return _read_items([(f"{name} item {i + 1}", body) for i, body in enumerate(data)], "json", fmt)


LOG_SUFFIXES = (".jsonl", ".json", ".ndjson", ".log")  # names that promise JSON: never read as a prompt


def _too_large(name: str, max_bytes: int) -> TranscriptError:
    return TranscriptError(Sentence("doctor_input_refused.too_large_file", name=name, mb=max_bytes / 2**20))


def read_path(path: Path, max_bytes: int = MAX_DOCTOR_BYTES) -> tuple[str, bytes]:
    """A file's name and bytes, read once in bounded pieces: a FIFO or ``<(zcat log.gz)`` works, and
    ``/dev/zero`` is refused at ``max_bytes``."""
    parts: list[bytes] = []
    size = 0
    with path.open("rb") as handle:
        while piece := handle.read(READ_CHUNK):
            size += len(piece)
            if size > max_bytes:
                raise _too_large(str(path), max_bytes)
            parts.append(piece)
    return path.name, b"".join(parts)


def _gunzip(name: str, data: bytes, max_bytes: int) -> bytes:
    """Every member of a gzip file, decompressed to at most ``max_bytes``."""
    out: list[bytes] = []
    size = 0
    while data:
        inflater = zlib.decompressobj(wbits=31)
        try:
            piece = inflater.decompress(data, max_bytes + 1 - size)
        except zlib.error as exc:
            raise TranscriptError(Sentence("doctor_input_refused.not_gzip", name=name, error=str(exc))) from None
        size += len(piece)
        if size > max_bytes or inflater.unconsumed_tail:
            raise _too_large(f"{name} decompressed", max_bytes)
        out.append(piece)
        data = inflater.unused_data if inflater.eof else b""
    return b"".join(out)


def _decoded(name: str, data: bytes, max_bytes: int, notes: list[str]) -> tuple[str, str]:
    """``(name, text)`` of one file: gzip opened (its name without ``.gz``), UTF-16 decoded, the rest as UTF-8."""
    if data.startswith(GZIP_MAGIC):
        data = _gunzip(name, data, max_bytes)
        notes.append(Sentence("doctor_notes.gzip", name=name))
        name = name[:-3] if name.lower().endswith(".gz") else name
    if data.startswith(UTF16_BOMS):
        try:
            data = data.decode("utf-16").encode("utf-8")
        except UnicodeDecodeError as exc:
            raise TranscriptError(Sentence("doctor_input_refused.not_utf16", name=name, byte=exc.start)) from None
        notes.append(Sentence("doctor_notes.utf16", name=name))
    elif len(data) >= 4 and data[:4096].count(0) * 3 > min(len(data), 4096):  # every other byte zero
        raise TranscriptError(Sentence("doctor_input_refused.utf16_no_bom", name=name))
    try:
        return name, read_document(data, name, max_bytes)
    except DocumentError as exc:
        try:
            data.decode("utf-8")
        except UnicodeDecodeError as bad:  # a log: the line says more than the byte
            if "UTF-8" in str(exc):
                line = data.count(b"\n", 0, bad.start) + 1
                raise TranscriptError(Sentence("doctor_read.not_utf8", name=name, line=line, byte=bad.start)) from None
        raise TranscriptError(said(exc)) from None


def looks_like_log(data: bytes) -> bool:
    """Whether bytes read by `read_path` hold a JSON log (else text files, one prompt each)."""
    if data.startswith(GZIP_MAGIC):
        return True  # agents' logs are rotated and compressed; a prompt seldom is
    head = data[:4096]
    if head.startswith(UTF16_BOMS):
        head = head[:4096 - (len(head) % 2)].decode("utf-16", "replace").encode()
    return head.lstrip()[:1] in (b"{", b"[")


def load_inputs(files: Sequence[tuple[str, bytes]], max_bytes: int = MAX_DOCTOR_BYTES,
                fmt: str | None = None) -> Transcript:
    """Read uploaded or named files: one JSONL/JSON log, several text files (one per round, in name
    order), or one plain text file (a system prompt to compare strategies with). ``fmt`` forces the
    format of every line of a log (`formats.FORMATS`); by default it is decided for the whole log."""
    if not files:
        raise TranscriptError(Sentence("doctor_input_refused.no_input"))
    if sum(len(data) for _, data in files) > max_bytes:
        raise TranscriptError(Sentence("doctor_input_refused.too_large", mb=max_bytes / 1e6))
    tables = [(name, data) for name, data in files if parquet.is_parquet(data)]
    if tables:
        return _parquet(*tables[0], max_bytes, len(files))
    texts: list[tuple[str, str]] = []
    notes: list[str] = []
    for name, data in sorted(files, key=lambda f: f[0]):
        texts.append(_decoded(name, data, max_bytes, notes))
    transcript = _transcript(texts, fmt)
    transcript.notes = notes + transcript.notes
    return transcript


def _parquet(name: str, data: bytes, max_bytes: int, files: int) -> Transcript:
    """A Parquet spans dataframe (Phoenix's), alone: its rows read as the JSON dataframe's are."""
    if files > 1:
        raise TranscriptError(Sentence("doctor_notes.parquet_alone", name=name))
    return traces.read_documents([(name, parquet.frame_rows(data, name, max_bytes))])


def _transcript(texts: list[tuple[str, str]], fmt: str | None) -> Transcript:
    if len(texts) > 1:
        if any(t.lstrip().startswith(("{", "[")) for _, t in texts):
            raise TranscriptError(Sentence("doctor_input_refused.one_log"))
        return Transcript([text_round("user", text, name) for name, text in texts], [], "files")
    name, text = texts[0]
    stripped = text.lstrip()
    try:  # first: spans after a banner, or a tool's console lines, are named whatever the file's suffix
        trace = exports.read_text(text, name)
    except traces.TraceError as exc:
        raise TranscriptError(exc.args[0]) from None  # a `Sentence` stays one, for the page's language
    if trace is not None:
        return trace
    if name.lower().endswith(LOG_SUFFIXES) and not stripped.startswith(("{", "[")):
        first = stripped.splitlines()[0][:80] if stripped else ""
        raise TranscriptError(Sentence("doctor_input_refused.not_json_start", name=name, first=repr(first)))
    if stripped.startswith("["):
        return parse_json_array(text, name, fmt)
    if stripped.startswith("{"):
        transcript = parse_jsonl(text, name, fmt)
        if transcript.rounds or not name.endswith(".json"):
            return transcript
        return parse_json_array(text, name, fmt)
    return Transcript([text_round("system", text, name)], [], "system_prompt")


def load_paths(paths: Sequence[Path], fmt: str | None = None, max_bytes: int = MAX_DOCTOR_BYTES) -> Transcript:
    """`load_inputs` on files read once each by `read_path`, within one size budget."""
    files: list[tuple[str, bytes]] = []
    left = max_bytes
    for path in paths:
        name, data = read_path(path, left)
        files.append((name, data))
        left -= len(data)
    return load_inputs(files, max_bytes, fmt)
