"""One trace made here end to end, never written by hand: the real OpenAI SDK calls the embedded llama-server's
``/v1`` through the capture proxy, instrumented at once by OpenInference (openinference-instrumentation-openai)
and by OpenTelemetry's GenAI instrumentation (opentelemetry-instrumentation-openai-v2); the OpenTelemetry SDK's
in-memory exporter hands the spans to its OTLP encoder, written as OTLP JSON, one export per line (the
collector's file exporter format). The doctor reads each trace as it reads the proxy's log of the same calls,
and the two say the same."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import openai
import pytest

from core import doctor
from core.capture.proxy import CaptureServer

SYSTEM = "You are a terse assistant. Answer in one word. The time is {time}."
TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "The weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}]


def otlp_json(spans) -> str:
    """The spans as one OTLP JSON export: the SDK's own protobuf encoding, in protobuf's JSON mapping, with the
    ids in hex as the OTLP JSON spec writes them."""
    from google.protobuf.json_format import MessageToDict
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
    document = MessageToDict(encode_spans(spans))
    for batch in document["resourceSpans"]:
        for scope in batch["scopeSpans"]:
            for span in scope["spans"]:
                for key in ("traceId", "spanId", "parentSpanId"):
                    if key in span:
                        span[key] = base64.b64decode(span[key]).hex()
    return json.dumps(document)


@pytest.fixture()
def traced(monkeypatch):
    """A tracer provider with an in-memory exporter, both instrumentations on it, content on the spans."""
    monkeypatch.setenv("OTEL_SEMCONV_STABILITY_OPT_IN", "gen_ai_latest_experimental")
    monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "SPAN_ONLY")
    from openinference.instrumentation.openai import OpenAIInstrumentor as OpenInference
    from opentelemetry.instrumentation.openai_v2 import OpenAIInstrumentor as GenAI
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    instrumentors = [OpenInference(), GenAI()]
    for instrumentor in instrumentors:
        instrumentor.instrument(tracer_provider=provider)
    yield exporter
    for instrumentor in instrumentors:
        instrumentor.uninstrument()
    provider.shutdown()


def test_a_real_trace_and_the_proxy_log_of_the_same_calls_agree(local_server, traced, tmp_path: Path):
    log = tmp_path / "capture.jsonl"
    with CaptureServer(local_server.url, log) as proxy:
        client = openai.OpenAI(base_url=proxy.base_url + "/v1", api_key="not-needed", max_retries=0, timeout=300)
        messages = [{"role": "system", "content": SYSTEM.format(time="18:00")}, {"role": "user", "content": "Hi?"}]
        for question in ("Sky colour?", "Grass colour?"):  # two rounds that append, one that puts a new time first
            answer = client.chat.completions.create(model="smollm2", messages=messages, tools=TOOLS, max_tokens=3,
                                                    temperature=0)
            messages += [{"role": "assistant", "content": answer.choices[0].message.content or ""},
                         {"role": "user", "content": question}]
        messages[0]["content"] = SYSTEM.format(time="18:05")
        client.chat.completions.create(model="smollm2", messages=messages, tools=TOOLS, max_tokens=3, temperature=0)
        assert proxy.in_flight.wait_idle(30)
    spans = traced.get_finished_spans()
    by_scope = {}
    for span in spans:
        by_scope.setdefault(span.instrumentation_scope.name, []).append(span)
    assert len(by_scope) == 2 and all(len(s) == 3 for s in by_scope.values()), by_scope.keys()

    logged = doctor.analyse(doctor.load_paths([log]))
    expected = [(f.breaks_cache, f.cause, f.message_index) for f in logged.findings]
    assert expected == [(False, doctor.NONE, None), (False, doctor.NONE, None), (True, doctor.TIMESTAMP, 0)]
    for scope, scoped in by_scope.items():
        path = tmp_path / f"{scope}.jsonl"
        path.write_text(otlp_json(scoped) + "\n")
        transcript = doctor.load_paths([path])
        assert transcript.kind == "trace" and not transcript.errors, transcript.errors
        analysis = doctor.analyse(transcript)
        assert [(f.breaks_cache, f.cause, f.message_index) for f in analysis.findings] == expected, scope
        assert [r.chat for r in transcript.rounds] == [r.chat for r in logged.rounds], scope  # the same messages
        first = analysis.first_break
        assert first is not None and first.first_diff_char is not None
        if "openinference" in scope:  # it records the tools and the server's cached tokens: all as logged
            assert [r.raw_tools for r in transcript.rounds] == [TOOLS] * 3
            assert [f.measured_cached_tokens for f in analysis.findings] == \
                [f.measured_cached_tokens for f in logged.findings]
            assert analysis.findings[1].measured_cached_tokens > 0
        else:  # this GenAI instrumentation records neither the tools nor the cached tokens: said, not guessed
            assert any("gen_ai.tool.definitions" in note for note in transcript.notes)
            assert all(f.measured_cached_tokens is None for f in analysis.findings)


def test_a_prompt_the_sdk_cut_at_its_attribute_limit_gets_no_verdict(local_server, tmp_path: Path):
    """The OpenTelemetry SDK's own attribute length limit (SpanLimits, OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT) cuts a
    long system prompt at 1,024 characters: the doctor says so per round and compares nothing it cannot see."""
    from openinference.instrumentation.openai import OpenAIInstrumentor
    from opentelemetry.sdk.trace import SpanLimits, TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    exporter = InMemorySpanExporter()
    provider = TracerProvider(span_limits=SpanLimits(max_attribute_length=1024))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    instrumentor = OpenAIInstrumentor()
    instrumentor.instrument(tracer_provider=provider)
    try:
        client = openai.OpenAI(base_url=local_server.url + "/v1", api_key="not-needed", max_retries=0, timeout=300)
        rules = " ".join(f"Rule {n}: answer briefly and politely." for n in range(1, 41))  # about 1,500 characters
        messages = [{"role": "system", "content": rules}, {"role": "user", "content": "Hi?"}]
        for _ in range(2):
            answer = client.chat.completions.create(model="smollm2", messages=messages, max_tokens=2, temperature=0)
            messages += [{"role": "assistant", "content": answer.choices[0].message.content or ""},
                         {"role": "user", "content": "More?"}]
    finally:
        instrumentor.uninstrument()
        provider.shutdown()
    path = tmp_path / "cut.jsonl"
    path.write_text(otlp_json(exporter.get_finished_spans()) + "\n")
    analysis = doctor.analyse(doctor.load_paths([path]))
    assert [f.cause for f in analysis.findings] == [doctor.NOT_COMPARED] * 2
    assert all(f.not_compared for f in analysis.findings)
    assert any("at 1,024 characters" in (f.not_compared or "") or "not whole JSON (1,024 characters" in
               (f.not_compared or "") for f in analysis.findings)
    assert all(f.verdict is None and f.measured_cached_tokens is None for f in analysis.findings)
