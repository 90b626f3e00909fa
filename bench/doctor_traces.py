"""Cache doctor on a big trace: a 10,000-span OTLP JSON file (OpenInference attributes, as Phoenix or the
collector's file exporter would hold them) read and diagnosed, time and peak memory, in a fresh process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from bench.common import finish, spread, table

CONVERSATIONS, ROUNDS, REPEATS = 1_000, 10, 3  # 10,000 LLM spans, plus one agent span per conversation
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


def write_trace(path: Path) -> int:
    """One export per 100 spans, one per line (the collector's file exporter); conversations run at once, so
    their spans interleave in time. Returns the number of spans."""
    spans = []
    for round_ in range(ROUNDS):
        for conversation in range(CONVERSATIONS):
            start = 1_788_000_000_000_000_000 + (round_ * CONVERSATIONS + conversation) * 1_000_000
            spans.append(_span(conversation, round_, start))
    spans += [{"traceId": f"{c:032x}", "spanId": f"{c:016x}", "name": "agent", "startTimeUnixNano": "1",
               "attributes": [_attr("openinference.span.kind", "AGENT")]} for c in range(CONVERSATIONS)]
    with path.open("w") as out:
        for start in range(0, len(spans), 100):
            document = {"resourceSpans": [{"resource": {"attributes": [_attr("service.name", "shop-agent")]},
                                           "scopeSpans": [{"scope": {"name": "openinference.instrumentation.openai"},
                                                           "spans": spans[start:start + 100]}]}]}
            out.write(json.dumps(document) + "\n")
    return len(spans)


def main() -> dict:
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "trace.jsonl"
        count = write_trace(path)
        size_mb = path.stat().st_size / 2**20
        runs = []
        root = Path(__file__).resolve().parent.parent
        for _ in range(REPEATS):
            proc = subprocess.run([sys.executable, "-c", MEASURE, str(path)], capture_output=True, text=True,
                                  cwd=root, env={**os.environ, "PYTHONPATH": str(root)}, check=True)
            runs.append({**json.loads(proc.stdout.strip().splitlines()[-1]), "load_1min": os.getloadavg()[0]})
    rows = [("read (parse + rounds)", spread([r["read_s"] for r in runs])),
            ("read + diagnose", spread([r["total_s"] for r in runs])),
            ("CPU time of that process", spread([r["cpu_s"] for r in runs]))]
    print(table(rows, "s"))
    peak = spread([r["peak_mb"] for r in runs])
    print(f"peak RSS: {peak['median']:.0f} MB median; file {size_mb:.1f} MB, {count:,} spans, "
          f"{runs[0]['rounds']:,} rounds, {runs[0]['breaks']} breaks; load average {[r['load_1min'] for r in runs]}")
    key = {"median_s": rows[1][1]["median"], "cpu_s": rows[2][1]["median"], "peak_mb": peak["median"],
           "breaks_found": runs[0]["breaks"], "load_1min": [r["load_1min"] for r in runs],
           "goal_met": rows[1][1]["median"] < 10 and peak["max"] < 1024}
    return finish("doctor_traces", {"spans": count, "llm_spans": CONVERSATIONS * ROUNDS, "file_mb": round(size_mb, 1),
                                    "rows": dict(rows), "peak_mb": peak, "runs": runs}, key,
                  f"{count:,}-span trace ({size_mb:.0f} MB) read and diagnosed in {key['median_s']:.2f} s median "
                  f"({key['cpu_s']:.2f} s of CPU), peak {key['peak_mb']:.0f} MB ({runs[0]['breaks']} breaks found; "
                  "goal < 10 s and < 1 GB)")


if __name__ == "__main__":
    main()
