"""Writes this folder's traces with the real tools, never by hand: the OpenAI SDK calls the embedded llama-server
(SmolLM2, `core.engine.server.LocalServer`), instrumented by OpenInference (openinference-instrumentation-openai)
and/or OpenTelemetry's GenAI instrumentation (opentelemetry-instrumentation-openai-v2); the OpenTelemetry SDK's own
exporters write the files: `ConsoleSpanExporter` to a file (``ReadableSpan.to_json()``, pretty-printed, one object
per span, concatenated), the same exporter with a one-line formatter (one object per line), and the SDK's OTLP
encoder in protobuf's JSON mapping (one export per line, as the collector's file exporter writes).

Rerun: ``.venv/bin/python tests/data/doctor/traces/sdk/generate.py`` (about a minute). The answers differ from run to
run only in ids, times and the model's words; the tests assert what the script sets up (which round breaks and why).
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[4]))

SYSTEM = "You are a terse assistant for a weather desk. Answer in one word. The time is {time}."
TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "The weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]
QUESTIONS = ("Sky colour?", "Grass colour?", "Snow colour?")


def conversation(client, *, new_time_on_round: int | None) -> None:
    """Four rounds of one conversation, each appending the answer and a question; from ``new_time_on_round`` on
    (counting from 1) the system prompt carries a new time: a real cache break on that round."""
    messages = [{"role": "system", "content": SYSTEM.format(time="18:00")}, {"role": "user", "content": "Hi?"}]
    for number in range(1, 5):
        if new_time_on_round is not None and number >= new_time_on_round:
            messages[0]["content"] = SYSTEM.format(time="18:05")
        answer = client.chat.completions.create(model="smollm2", messages=messages, tools=TOOLS, max_tokens=4,
                                                temperature=0)
        if number <= len(QUESTIONS):
            messages += [{"role": "assistant", "content": answer.choices[0].message.content or ""},
                         {"role": "user", "content": QUESTIONS[number - 1]}]


def traced(instrumentors: Sequence[str], exporters: Sequence[object], run: Callable[[], None], *,
           limits: object = None) -> None:
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    provider = TracerProvider(resource=Resource.create({"service.name": "weather-desk"}),
                              **({"span_limits": limits} if limits else {}))
    for exporter in exporters:
        provider.add_span_processor(SimpleSpanProcessor(exporter))
    active = []
    for name in instrumentors:
        if name == "openinference":
            from openinference.instrumentation.openai import OpenAIInstrumentor
        else:
            from opentelemetry.instrumentation.openai_v2 import OpenAIInstrumentor  # type: ignore[no-redef]
        instrumentor = OpenAIInstrumentor()
        instrumentor.instrument(tracer_provider=provider)
        active.append(instrumentor)
    try:
        tracer = provider.get_tracer("weather-desk")
        with tracer.start_as_current_span("agent run"):
            run()
    finally:
        for instrumentor in active:
            instrumentor.uninstrument()
        provider.shutdown()


class OtlpLines:
    """The SDK's OTLP encoder, protobuf's JSON mapping, ids in hex (the OTLP JSON spec): one export per line."""

    def __init__(self, path: Path) -> None:
        self.path, self.spans = path, []

    def export(self, spans):
        from opentelemetry.sdk.trace.export import SpanExportResult
        self.spans += spans
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        import base64

        from google.protobuf.json_format import MessageToDict
        from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
        document = MessageToDict(encode_spans(self.spans))
        for batch in document["resourceSpans"]:
            for scope in batch["scopeSpans"]:
                for span in scope["spans"]:
                    for key in ("traceId", "spanId", "parentSpanId"):
                        if key in span:
                            span[key] = base64.b64decode(span[key]).hex()
        self.path.write_text(json.dumps(document) + "\n")

    def force_flush(self, timeout_millis: int = 0) -> bool:
        return True


def main() -> None:
    import openai
    from opentelemetry.sdk.trace import SpanLimits
    from opentelemetry.sdk.trace.export import ConsoleSpanExporter

    from core.engine.server import LocalServer
    os.environ["OTEL_SEMCONV_STABILITY_OPT_IN"] = "gen_ai_latest_experimental"
    os.environ["OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"] = "SPAN_ONLY"
    with LocalServer(context=4096, log_dir=Path("/tmp")) as server:
        client = openai.OpenAI(base_url=server.url + "/v1", api_key="not-needed", max_retries=0, timeout=300)
        files = {}

        def console(name: str, one_line: bool = False) -> ConsoleSpanExporter:
            files[name] = (HERE / name).open("w")
            if one_line:
                return ConsoleSpanExporter(out=files[name], formatter=lambda s: s.to_json(indent=None) + os.linesep)
            return ConsoleSpanExporter(out=files[name])

        # both instrumentations on one client: every call recorded twice, nested; round 3 puts a new time first
        traced(["openinference", "genai"], [console("console_two_instrumentations.json"),
                                           OtlpLines(HERE / "otlp_two_instrumentations.jsonl")],
               lambda: conversation(client, new_time_on_round=3))
        # OpenInference alone, the prompt kept: every round extends the one before
        traced(["openinference"], [console("console_openinference.json")],
               lambda: conversation(client, new_time_on_round=None))
        # GenAI alone, one span per line; round 2 puts a new time first
        traced(["genai"], [console("lines_genai.jsonl", one_line=True)],
               lambda: conversation(client, new_time_on_round=2))
        # the SDK's attribute limit cuts every prompt at 64 characters: nothing can be compared, said per round
        traced(["genai"], [console("console_genai_cut.json")], lambda: conversation(client, new_time_on_round=None),
               limits=SpanLimits(max_attribute_length=64))
        for handle in files.values():
            handle.close()


if __name__ == "__main__":
    main()
