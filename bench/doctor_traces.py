"""Cache doctor on a big trace, in each layout it reads: 11,000 spans (10,000 LLM calls with OpenInference
attributes, 1,000 agent spans) written as OTLP JSON (the collector's file exporter), as the OpenTelemetry SDK's
console exporter prints them (``ReadableSpan.to_json()``, pretty and concatenated; and one per line), as a
Langfuse trace download (JSON-string ``input``), as Phoenix's spans dataframe saved with ``to_json(orient="records")``
and as MLflow traces (``Trace.to_json()``, one conversation's trace per line, every attribute a JSON string); each
read and diagnosed in a fresh process: time and peak memory."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from datetime import datetime, timezone
from pathlib import Path

from bench.common import finish, spread

CONVERSATIONS, ROUNDS, REPEATS = 1_000, 10, 2  # 10,000 LLM spans, plus one agent span per conversation
SYSTEM = "You are a support agent for an online shop. " * 25  # about 1,100 characters
TOOLS = [json.dumps({"type": "function", "function": {"name": name, "description": f"{name} for an order",
                                                      "parameters": {"type": "object", "properties": {
                                                          "order_id": {"type": "string"}}}}})
         for name in ("lookup_order", "refund_order", "track_parcel")]
MEASURE = """
import json, resource, sys, time
start = time.perf_counter()
from core import doctor
from pathlib import Path
transcript = doctor.load_paths([Path(sys.argv[1])])
read = time.perf_counter()
analysis = doctor.analyse(transcript)
done = time.perf_counter()
usage = resource.getrusage(resource.RUSAGE_SELF)
print(json.dumps({"read_s": read - start, "total_s": done - start, "cpu_s": usage.ru_utime + usage.ru_stime,
                  "rounds": len(analysis.findings),
                  "breaks": sum(f.breaks_cache for f in analysis.findings),
                  "peak_mb": usage.ru_maxrss / 1024}))
"""


def _attr(key: str, value: object) -> dict[str, object]:
    wrapped = {"intValue": str(value)} if isinstance(value, int) else {"stringValue": value}
    return {"key": key, "value": wrapped}


def _span(conversation: int, round_: int, start_ns: int) -> dict[str, object]:
    """Round ``round_`` of a conversation: the history so far, and every 5th conversation puts a new time in
    its system prompt from round 6 on (a break the doctor must find)."""
    time_line = "Now: 10:00." if conversation % 5 or round_ < 6 else "Now: 10:05."
    messages = [("system", f"{time_line} {SYSTEM}")]
    for turn in range(round_):
        messages += [("user", f"Conversation {conversation}, question {turn}: where is order A-{turn:04d}?"),
                     ("assistant", f"Order A-{turn:04d} left the warehouse on day {turn} and arrives soon.")]
    messages.append(("user", f"Conversation {conversation}, question {round_}: and the refund?"))
    attributes = [_attr("openinference.span.kind", "LLM"), _attr("session.id", f"session-{conversation}"),
                  _attr("llm.invocation_parameters", json.dumps({"model": "gpt-4o-mini", "temperature": 0}))]
    for index, (role, content) in enumerate(messages):
        attributes += [_attr(f"llm.input_messages.{index}.message.role", role),
                       _attr(f"llm.input_messages.{index}.message.content", content)]
    attributes += [_attr(f"llm.tools.{index}.tool.json_schema", tool) for index, tool in enumerate(TOOLS)]
    prompt = sum(len(c) for _, c in messages) // 4 + 60
    attributes += [_attr("llm.token_count.prompt", prompt),
                   _attr("llm.token_count.prompt_details.cache_read", (prompt // 128) * 128 if round_ else 0)]
    return {"traceId": f"{conversation:016x}{round_:016x}", "spanId": f"{conversation:08x}{round_:08x}",
            "name": "ChatCompletion", "kind": "SPAN_KIND_INTERNAL", "startTimeUnixNano": str(start_ns),
            "endTimeUnixNano": str(start_ns + 900_000_000), "attributes": attributes, "status": {}}


def _all_spans() -> list[dict[str, object]]:
    """Conversations run at once, so their spans interleave in time; one agent span per conversation, each LLM
    span inside its conversation's agent span."""
    spans = []
    for round_ in range(ROUNDS):
        for conversation in range(CONVERSATIONS):
            start = 1_788_000_000_000_000_000 + (round_ * CONVERSATIONS + conversation) * 1_000_000
            spans.append({**_span(conversation, round_, start), "parentSpanId": f"a{conversation:015x}"})
    spans += [{"traceId": f"{c:032x}", "spanId": f"a{c:015x}", "name": "agent", "startTimeUnixNano": "1",
               "attributes": [_attr("openinference.span.kind", "AGENT")]} for c in range(CONVERSATIONS)]
    return spans


def write_otlp(path: Path, spans: list[dict[str, object]]) -> None:
    """One export per 100 spans, one per line (the collector's file exporter)."""
    with path.open("w") as out:
        for start in range(0, len(spans), 100):
            document = {"resourceSpans": [{"resource": {"attributes": [_attr("service.name", "shop-agent")]},
                                           "scopeSpans": [{"scope": {"name": "openinference.instrumentation.openai"},
                                                           "spans": spans[start:start + 100]}]}]}
            out.write(json.dumps(document) + "\n")


def _sdk(span: dict[str, object]) -> dict[str, object]:
    """A span as ``ReadableSpan.to_json()`` writes it (the same keys, in its order)."""
    start = datetime.fromtimestamp(int(str(span["startTimeUnixNano"])) / 1e9, timezone.utc)
    attributes = span["attributes"]
    assert isinstance(attributes, list)
    return {"name": span["name"], "context": {"trace_id": f"0x{span['traceId']}", "span_id": f"0x{span['spanId']}",
                                              "trace_state": "[]"},
            "kind": "SpanKind.INTERNAL", "parent_id": f"0x{span['parentSpanId']}" if "parentSpanId" in span else None,
            "start_time": start.strftime("%Y-%m-%dT%H:%M:%S.%fZ"), "end_time": start.strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
            "status": {"status_code": "UNSET"},
            "attributes": {a["key"]: int(a["value"]["intValue"]) if "intValue" in a["value"]
                           else a["value"]["stringValue"] for a in attributes},
            "events": [], "links": [], "resource": {"attributes": {"service.name": "shop-agent"}, "schema_url": ""}}


def write_console(path: Path, spans: list[dict[str, object]]) -> None:
    """As ``ConsoleSpanExporter`` prints: each span's ``to_json()`` (indent 4) and a line end, one after another."""
    with path.open("w") as out:
        for span in spans:
            out.write(json.dumps(_sdk(span), indent=4) + "\n")


def write_sdk_lines(path: Path, spans: list[dict[str, object]]) -> None:
    with path.open("w") as out:
        for span in spans:
            out.write(json.dumps(_sdk(span)) + "\n")


def write_langfuse(path: Path, spans: list[dict[str, object]]) -> None:
    """A Langfuse trace download: each LLM span a ``GENERATION`` whose ``input`` is a JSON string of chat messages
    and whose ``metadata`` (a JSON string) keeps the tools, as Langfuse stores them; agent spans as ``SPAN``s."""
    observations = []
    for span in spans:
        values = _sdk(span)["attributes"]
        assert isinstance(values, dict)
        if values.get("openinference.span.kind") != "LLM":
            observations.append({"id": span["spanId"], "traceId": span["traceId"], "type": "SPAN", "name": "agent",
                                 "startTime": "2026-09-01T00:00:00.000Z", "input": None, "metadata": "{}"})
            continue
        messages = [{"role": values[f"llm.input_messages.{i}.message.role"],
                     "content": values[f"llm.input_messages.{i}.message.content"]}
                    for i in range(ROUNDS * 2 + 2) if f"llm.input_messages.{i}.message.role" in values]
        tools = [json.loads(values[f"llm.tools.{i}.tool.json_schema"]) for i in range(len(TOOLS))]
        start = _sdk(span)["start_time"]
        observations.append({
            "id": span["spanId"], "traceId": span["traceId"], "parentObservationId": span.get("parentSpanId"),
            "type": "GENERATION", "name": "ChatCompletion", "startTime": start, "model": "gpt-4o-mini",
            "modelParameters": {"temperature": 0}, "input": json.dumps(messages),
            "metadata": json.dumps({"tools": tools}), "sessionId": values["session.id"],
            "usageDetails": {"input": values["llm.token_count.prompt"] - values[
                "llm.token_count.prompt_details.cache_read"],
                "input_cache_read": values["llm.token_count.prompt_details.cache_read"]}})
    path.write_text(json.dumps({"trace": {"id": "bench", "sessionId": None}, "observations": observations}))


def _chat(values: dict[str, object]) -> list[dict[str, object]]:
    return [{"role": values[f"llm.input_messages.{i}.message.role"],
             "content": values[f"llm.input_messages.{i}.message.content"]}
            for i in range(ROUNDS * 2 + 2) if f"llm.input_messages.{i}.message.role" in values]


def write_phoenix(path: Path, spans: list[dict[str, object]]) -> None:
    """Phoenix's spans dataframe as ``to_json(orient="records")`` writes it: a row per span, times in milliseconds,
    ``attributes.llm.input_messages`` a list of ``{"message.role": ...}`` objects, counts as floats."""
    rows = []
    for span in spans:
        values = _sdk(span)["attributes"]
        assert isinstance(values, dict)
        start_ms = int(str(span["startTimeUnixNano"])) // 1_000_000
        row: dict[str, object] = {
            "name": span["name"], "span_kind": values["openinference.span.kind"],
            "parent_id": span.get("parentSpanId"), "start_time": start_ms, "end_time": start_ms + 900,
            "status_code": "OK", "status_message": "", "events": [], "context.span_id": span["spanId"],
            "context.trace_id": span["traceId"], "attributes.session.id": values.get("session.id")}
        if values["openinference.span.kind"] == "LLM":
            row.update({"attributes.llm.input_messages": [{"message.role": m["role"], "message.content": m["content"]}
                                                          for m in _chat(values)],
                        "attributes.llm.tools": [{"tool.json_schema": t} for t in TOOLS],
                        "attributes.llm.invocation_parameters": values["llm.invocation_parameters"],
                        "attributes.llm.token_count.prompt": float(values["llm.token_count.prompt"]),
                        "attributes.llm.token_count.prompt_details.cache_read": float(
                            values["llm.token_count.prompt_details.cache_read"])})
        rows.append(row)
    path.write_text(json.dumps(rows))


def write_mlflow(path: Path, spans: list[dict[str, object]]) -> None:
    """MLflow's ``Trace.to_json()``, one conversation's trace per line: the request body in ``mlflow.spanInputs``
    and the usage in ``mlflow.chat.tokenUsage``, every attribute JSON-encoded, as MLflow writes them."""
    traces: dict[str, list[dict[str, object]]] = {}
    for span in spans:
        values = _sdk(span)["attributes"]
        assert isinstance(values, dict)
        llm = values["openinference.span.kind"] == "LLM"
        attributes = {"mlflow.spanType": json.dumps("CHAT_MODEL" if llm else "AGENT")}
        if llm:
            attributes.update({
                "mlflow.spanInputs": json.dumps({"model": "gpt-4o-mini", "messages": _chat(values),
                                                 "tools": [json.loads(t) for t in TOOLS], "temperature": 0}),
                "mlflow.chat.tokenUsage": json.dumps({
                    "input_tokens": values["llm.token_count.prompt"],
                    "cache_read_input_tokens": values["llm.token_count.prompt_details.cache_read"]})})
        start = int(str(span["startTimeUnixNano"]))
        conversation = str(span.get("parentSpanId") or span["spanId"])
        traces.setdefault(conversation, []).append({
            "trace_id": conversation, "span_id": span["spanId"], "parent_span_id": span.get("parentSpanId"),
            "name": span["name"], "start_time_unix_nano": start, "end_time_unix_nano": start + 900_000_000,
            "attributes": attributes, "events": []})
    with path.open("w") as out:
        for conversation, trace_spans in traces.items():
            out.write(json.dumps({"info": {"trace_id": f"tr-{conversation}"}, "data": {"spans": trace_spans}}) + "\n")


LAYOUTS = {"OTLP JSON, one export of 100 spans per line": ("trace.jsonl", write_otlp),
           "SDK console exporter (to_json, indent 4, concatenated)": ("console.json", write_console),
           "SDK span objects, one per line": ("spans.jsonl", write_sdk_lines),
           "Langfuse download (JSON-string input)": ("langfuse.json", write_langfuse),
           "Phoenix spans dataframe (to_json records)": ("phoenix.json", write_phoenix),
           "MLflow Trace.to_json(), one trace per line": ("mlflow.jsonl", write_mlflow)}


def _measure(path: Path) -> list[dict[str, float]]:
    root = Path(__file__).resolve().parent.parent
    runs = []
    for _ in range(REPEATS):
        proc = subprocess.run([sys.executable, "-c", MEASURE, str(path)], capture_output=True, text=True,
                              cwd=root, env={**os.environ, "PYTHONPATH": str(root)}, check=True)
        runs.append({**json.loads(proc.stdout.strip().splitlines()[-1]), "load_1min": os.getloadavg()[0]})
    return runs


def main() -> dict:
    spans = _all_spans()
    results, lines = {}, []
    with tempfile.TemporaryDirectory() as folder:
        for name, (file_name, write) in LAYOUTS.items():
            path = Path(folder) / file_name
            write(path, spans)
            size_mb = round(path.stat().st_size / 2**20, 1)
            runs = _measure(path)
            path.unlink()
            total, cpu, peak = (spread([r[k] for r in runs]) for k in ("total_s", "cpu_s", "peak_mb"))
            results[name] = {"file_mb": size_mb,
                             "total_s": total, "cpu_s": cpu, "peak_mb": peak, "runs": runs}
            lines.append((name, cpu["median"], peak["median"], runs[0]["rounds"], runs[0]["breaks"], total["median"],
                          size_mb))
    print(f"{'layout':56} {'MB':>5} {'CPU s':>6} {'peak MB':>8} {'rounds':>7} {'breaks':>7} {'wall s':>7}")
    for name, cpu_s, peak_mb, rounds, breaks, wall, size_mb in lines:
        print(f"{name:56} {size_mb:5.0f} {cpu_s:6.2f} {peak_mb:8.0f} {rounds:7,} {breaks:7} {wall:7.2f}")
    worst_cpu, worst_peak = max(line[1] for line in lines), max(line[2] for line in lines)
    key = {"worst_cpu_s": worst_cpu, "worst_peak_mb": worst_peak, "breaks_found": [line[4] for line in lines],
           "goal_met": worst_cpu < 10 and worst_peak < 1024, "load_1min": os.getloadavg()[0]}
    return finish("doctor_traces", {"spans": len(spans), "llm_spans": CONVERSATIONS * ROUNDS, "layouts": results},
                  key, f"{len(spans):,} spans in {len(lines)} layouts: at most {worst_cpu:.2f} s of CPU and "
                       f"{worst_peak:.0f} MB peak (goal < 10 s and < 1 GB)")


if __name__ == "__main__":
    main()
