"""Span documents in every layout the tools write, read into one `Span` shape (ids, parent, start, name, flat
attributes, events), so `traces` reads the conventions once whatever the file.

The layouts (`LAYOUTS`, tried in order on each JSON document of a file):

- **OTLP JSON** (``resourceSpans``; Tempo's ``batches``): the collector's file exporter, Jaeger's and Tempo's
  exports; ids hex, or base64 as protobuf's JSON mapping writes them.
- **Span objects**: the OpenTelemetry Python SDK's ``ReadableSpan.to_json()`` (what ``ConsoleSpanExporter``
  prints, and OpenLLMetry's console output: ``context.trace_id``, ``parent_id``, attributes as an object) and the
  span objects other tools write in that spirit: Phoenix's REST spans (``{"data": [...]}``), MLflow's
  ``Trace.to_json()`` (``{"info", "data": {"spans"}}``, 2.x ``context`` or 3.x ``span_id``/``start_time_unix_nano``),
  the OTel JS SDK's span list (``traceId``, ``id``, ``parentSpanContext`` or ``parentId``, ``timestamp`` in
  microseconds). One object, a
  list, a page, or one per line.
- **Phoenix's spans dataframe** (``client.spans.get_spans_dataframe()`` saved with ``DataFrame.to_json``: records
  as a list or one per line, pandas' default of one object per column, or the ``table`` layout Phoenix's own server
  sends): a row per span, ``context.span_id``, ``parent_id``, ``span_kind``, times in milliseconds, and one column
  per attribute (``attributes.llm.input_messages`` a list of ``{"message.role": ...}`` objects), spread here back
  into OpenInference's flat keys (``llm.input_messages.0.message.role``). The same dataframe saved as Parquet
  comes here too, its rows given as ``to_json`` writes them by `core.doctor.parquet`.

A file is split into its documents by `documents`: one JSON document, one per line, or objects concatenated as the
console exporter prints them (pretty-printed, one after another), after a banner line or a few.
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from core.doctor.model import json_problem
from core.words import Sentence

BANNER_LINES = 5  # lines of text a console exporter's host may print before the first span


@dataclass
class Span:
    """One span, whatever the document: ids, start and end (ns since the epoch; 0: not written), name, flat
    attributes, its events (name, attributes) and the span it sits in."""

    trace_id: str
    span_id: str
    start_ns: int
    name: str
    attributes: dict[str, Any] = field(default_factory=dict)
    where: str = ""
    parent: str | None = None
    events: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    end_ns: int = 0


def hex_id(value: Any) -> str:
    """An id as hex: as the OTLP JSON spec writes it, with the SDK's ``0x``, or base64 as protobuf's JSON mapping
    writes it."""
    text = str(value or "").removeprefix("0x")
    if re.fullmatch(r"[0-9a-fA-F]*", text):
        return text.lower()
    try:
        return base64.b64decode(text).hex()
    except ValueError:
        return text


def otlp_value(value: Any) -> Any:
    """An OTLP ``AnyValue`` as Python: strings, ints (JSON writes 64-bit ints as strings), arrays, maps."""
    if not isinstance(value, Mapping):
        return value
    for key in ("stringValue", "boolValue", "doubleValue"):
        if key in value:
            return value[key]
    if "intValue" in value:
        try:
            return int(value["intValue"])
        except (TypeError, ValueError):  # "lots": kept as sent, and named where it is read as a count
            return value["intValue"]
    if "arrayValue" in value:
        return [otlp_value(v) for v in (value["arrayValue"] or {}).get("values", [])]
    if "kvlistValue" in value:
        return {kv.get("key"): otlp_value(kv.get("value")) for kv in (value["kvlistValue"] or {}).get("values", [])}
    if "bytesValue" in value:
        return value["bytesValue"]
    return None


def _attributes(value: Any) -> dict[str, Any]:
    """Attributes as an object (SDK, MLflow, Phoenix) or as OTLP's list of key/value pairs."""
    if isinstance(value, Mapping):
        return dict(value)
    if isinstance(value, list):
        return {str(a.get("key")): otlp_value(a.get("value")) for a in value if isinstance(a, Mapping)}
    return {}


def _events(value: Any) -> list[tuple[str, dict[str, Any]]]:
    return [(str(e.get("name", "")), _attributes(e.get("attributes"))) for e in value or []
            if isinstance(e, Mapping)] if isinstance(value, list) else []


def _maps(value: Any) -> list[Mapping[str, Any]]:
    """The objects of a list (anything else in it, or a list that is not one, is skipped)."""
    return [item for item in value if isinstance(item, Mapping)] if isinstance(value, list) else []


def _otlp(document: Mapping[str, Any], where: str) -> Iterator[Span]:
    for batch in _maps(document.get("resourceSpans") or document.get("batches")):
        resource = _attributes(_map(batch.get("resource")).get("attributes"))
        for scope in _maps(batch.get("scopeSpans") or batch.get("instrumentationLibrarySpans")):
            for span in _maps(scope.get("spans")):
                span_id = hex_id(span.get("spanId"))
                yield Span(hex_id(span.get("traceId")), span_id, _nanoseconds(span.get("startTimeUnixNano")),
                           str(span.get("name", "")), {**resource, **_attributes(span.get("attributes"))},
                           f"{where} span {span_id[:16]}", hex_id(span.get("parentSpanId")) or None,
                           _events(span.get("events")), _nanoseconds(span.get("endTimeUnixNano")))


def _is_otlp(document: Any) -> bool:
    return isinstance(document, Mapping) and (isinstance(document.get("resourceSpans"), list)
                                              or isinstance(document.get("batches"), list))


def _nanoseconds(value: Any, unit: int = 1) -> int:
    """A start time: nanoseconds (an int, or its string), an ISO time (the SDK's ``start_time``), or in ``unit``
    nanoseconds (the JS SDK's microseconds, a ``[seconds, nanoseconds]`` pair)."""
    if isinstance(value, list) and len(value) == 2 and all(isinstance(v, int) for v in value):
        return int(value[0]) * 1_000_000_000 + int(value[1])
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return int(value * unit)
    if isinstance(value, str) and value.isdigit():
        return int(value) * unit
    if isinstance(value, str) and value:
        try:
            moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            return 0
        moment = moment if moment.tzinfo else moment.replace(tzinfo=timezone.utc)
        return int(moment.timestamp()) * 1_000_000_000 + moment.microsecond * 1000
    return 0


def _map(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _first(span: Mapping[str, Any], *keys: str) -> Any:
    context: Mapping[str, Any] = span["context"] if isinstance(span.get("context"), Mapping) else {}
    return next((source[k] for k in keys for source in (span, context) if source.get(k) is not None), None)


def is_span(item: Any) -> bool:
    """A span object: a name, attributes, and its own id under one of the names the tools use."""
    return isinstance(item, Mapping) and "name" in item and isinstance(item.get("attributes"), (Mapping, list)) \
        and _first(item, "span_id", "spanId", "id") is not None and not _is_otlp(item)


def _span_object(span: Mapping[str, Any], where: str) -> Span:
    js = "timestamp" in span and "start_time" not in span  # the OTel JS SDK: microseconds since the epoch
    span_id = hex_id(_first(span, "span_id", "spanId", "id"))
    resource: Mapping[str, Any] = span["resource"] if isinstance(span.get("resource"), Mapping) else {}
    start = _first(span, "start_time_unix_nano", "startTimeUnixNano", "start_time", "startTime", "timestamp")
    start_ns = _nanoseconds(start, 1000 if js else 1)
    end = _first(span, "end_time_unix_nano", "endTimeUnixNano", "end_time", "endTime")
    end_ns = start_ns + _nanoseconds(span.get("duration"), 1000) if js and start_ns else _nanoseconds(end)
    attributes = {**_attributes(resource.get("attributes")), **_attributes(span.get("attributes"))}
    if span.get("span_kind") and "openinference.span.kind" not in attributes:  # Phoenix moves it out of them
        attributes["openinference.span.kind"] = span["span_kind"]
    return Span(hex_id(_first(span, "trace_id", "traceId")), span_id, start_ns, str(span.get("name", "")), attributes,
                f"{where} span {span_id[:16]}",
                hex_id(_first(span, "parent_id", "parent_span_id", "parentSpanId", "parentId")
                       or _first(_map(span.get("parentSpanContext")), "spanId")) or None,
                _events(span.get("events")), end_ns)


def _span_list(document: Any) -> list[Any] | None:
    """The span objects of a document: one span, a list, a page (``data``), MLflow's ``data.spans``."""
    if isinstance(document, Mapping):
        data = document.get("data")
        if isinstance(data, Mapping):
            data = data.get("spans")
        document = data if isinstance(data, list) else document.get("spans", [document])
    if isinstance(document, list) and document and all(is_span(item) for item in document):
        return document
    return None


FRAME_ID = "context.span_id"  # the column every row of Phoenix's spans dataframe has


def _spread(key: str, value: Any, out: dict[str, Any]) -> None:
    """A dataframe cell as OpenInference's flat attributes: a list of objects spread by index, and so on inside
    them (``llm.input_messages`` → ``llm.input_messages.0.message.role``); anything else kept as it is."""
    if isinstance(value, list) and value and all(isinstance(item, Mapping) for item in value):
        for number, item in enumerate(value):
            for inner, part in item.items():
                _spread(f"{key}.{number}.{inner}", part, out)
    elif value is not None:
        out[key] = value


def _frame_rows(document: Any) -> list[Mapping[str, Any]] | None:
    """The rows of a saved spans dataframe (records, the ``table`` layout's ``data``, or pandas' default of one
    object per column, turned into rows), None when the document is not one."""
    if isinstance(document, Mapping) and isinstance(document.get("data"), list) and "schema" in document:
        document = document["data"]
    elif isinstance(document, Mapping) and isinstance(document.get(FRAME_ID), Mapping):
        columns = {key: value for key, value in document.items() if isinstance(value, Mapping)}
        document = [{key: column.get(index) for key, column in columns.items()} for index in document[FRAME_ID]]
    rows = document if isinstance(document, list) else [document]
    return rows if rows and all(isinstance(row, Mapping) and FRAME_ID in row for row in rows) else None


def _frame_row(row: Mapping[str, Any], where: str) -> Span:
    span_id = hex_id(row.get(FRAME_ID))
    attributes: dict[str, Any] = {}
    for key, value in row.items():
        if key.startswith("attributes."):
            _spread(key.removeprefix("attributes."), value, attributes)
    if row.get("span_kind") and "openinference.span.kind" not in attributes:
        attributes["openinference.span.kind"] = row["span_kind"]
    return Span(hex_id(row.get("context.trace_id")), span_id, _nanoseconds(row.get("start_time"), 1_000_000),
                str(row.get("name", "")), attributes, f"{where} span {span_id[:16]}",
                hex_id(row.get("parent_id")) or None, _events(row.get("events")),
                _nanoseconds(row.get("end_time"), 1_000_000))


@dataclass
class Layout:
    """One way of writing spans: whether a document is one, and its spans."""

    name: str
    matches: Callable[[Any], bool]
    spans: Callable[[Any, str], Iterator[Span]]


LAYOUTS = (
    Layout("OTLP JSON", _is_otlp, _otlp),
    Layout("span objects", lambda d: _span_list(d) is not None,
           lambda d, where: (_span_object(s, where) for s in _span_list(d) or [])),
    Layout("Phoenix spans dataframe", lambda d: _frame_rows(d) is not None,
           lambda d, where: (_frame_row(row, where) for row in _frame_rows(d) or [])),
)


def layout(document: Any) -> Layout | None:
    return next((layout for layout in LAYOUTS if layout.matches(document)), None)


def documents(text: str, name: str) -> tuple[list[tuple[str, Any]], str | None]:
    """The JSON documents of a file in order (one, one per line, or concatenated, after at most `BANNER_LINES`
    lines of text), and the first place that is not JSON (None: the whole file was read)."""
    lines = text.split("\n", BANNER_LINES + 1)
    skipped = next((n for n, line in enumerate(lines[:BANNER_LINES + 1]) if line.lstrip()[:1] in ("{", "[")), None)
    if skipped is None:
        return [], f"{name} line 1: not JSON"
    position = sum(len(line) + 1 for line in lines[:skipped])
    decoder, line, counted = json.JSONDecoder(), 1, 0
    found: list[tuple[str, Any]] = []
    while True:
        while position < len(text) and text[position] in " \t\r\n":
            position += 1
        if position >= len(text):
            return found, None
        line, counted = line + text.count("\n", counted, position), position
        try:
            document, position = decoder.raw_decode(text, position)
        except json.JSONDecodeError as exc:  # its line and column are the file's: the text is decoded whole
            return found, Sentence("doctor_read.not_json_line", where=f"{name} line {exc.lineno}",
                                   problem=json_problem(exc))
        except RecursionError:
            return found, f"{name} line {line}: not valid JSON (nested too deep)"
        found.append((f"{name} line {line}" if found or position < len(text.rstrip()) else name, document))
