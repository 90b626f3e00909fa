"""Run by `../against_llama.py` in LiteLLM's environment: an agent's conversation through ``litellm.completion`` (which
calls the OpenAI SDK) with LiteLLM's ``otel`` callback and OpenInference's OpenAI instrumentation on one tracer
provider, written by ``ConsoleSpanExporter``. Arguments: the llama-server's URL and the folder to write to.

Writes this folder's traces with the real tools, never by hand: `calls.py` (LiteLLM calling the OpenAI SDK, with
LiteLLM's own OpenTelemetry callback and OpenInference's OpenAI instrumentation both on, in a virtual environment of
their own) against the embedded llama-server (SmolLM2, `core.engine.server.LocalServer`). Each call is recorded
twice, as two spans side by side under the agent's span (LiteLLM writes its span after the call, from its success
callback, so it is not the parent of the client's span): the sibling duplicates the doctor must count once. The
OpenTelemetry SDK's ``ConsoleSpanExporter`` writes the file.

Rerun: ``python3 -m venv /tmp/litellm-venv && /tmp/litellm-venv/bin/pip install litellm
openinference-instrumentation-openai opentelemetry-sdk opentelemetry-exporter-otlp-proto-http openai`` then
``.venv/bin/python tests/data/doctor/traces/against_llama.py siblings /tmp/litellm-venv/bin/python`` (about a minute).
"""

from __future__ import annotations

import os
import sys
import threading
from pathlib import Path

from opentelemetry.sdk.trace import SpanProcessor

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # no download of the price list at import
os.environ["USE_OTEL_LITELLM_REQUEST_SPAN"] = "true"  # LiteLLM's own span per call, beside the client's

SYSTEM = "You are a terse assistant for a weather desk. Answer in one word. The time is {time}."
TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "The weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]
QUESTIONS = ("Sky colour?", "Grass colour?", "Snow colour?")

def conversation(url: str, new_time_on_round: int | None) -> None:
    """Four rounds of one conversation, each appending the answer and a question; from ``new_time_on_round`` on
    (counting from 1) the system prompt carries a new time: a real cache break there."""
    import litellm
    messages = [{"role": "system", "content": SYSTEM.format(time="18:00")}, {"role": "user", "content": "Hi?"}]
    for number in range(1, 5):
        if new_time_on_round is not None and number >= new_time_on_round:
            messages[0]["content"] = SYSTEM.format(time="18:05")
        answer = litellm.completion(model="openai/smollm2", api_base=url + "/v1", api_key="not-needed",
                                    messages=[dict(m) for m in messages], tools=TOOLS, max_tokens=4, temperature=0)
        if number <= len(QUESTIONS):
            messages += [{"role": "assistant", "content": answer.choices[0].message.content or ""},
                         {"role": "user", "content": QUESTIONS[number - 1]}]

class Ended(SpanProcessor):
    """Counts the spans of one name that have ended: LiteLLM writes its span from a callback on another thread,
    after the call returned, so the provider is shut down only once the last one is in."""

    def __init__(self, name: str) -> None:
        self.name, self.count, self.changed = name, 0, threading.Condition()

    def on_end(self, span: object) -> None:
        if getattr(span, "name", None) == self.name:
            with self.changed:
                self.count += 1
                self.changed.notify_all()

    def wait(self, count: int, seconds: float) -> None:
        with self.changed:
            if not self.changed.wait_for(lambda: self.count >= count, timeout=seconds):
                raise SystemExit(f"only {self.count} of {count} {self.name} spans ended in {seconds} s")

def main(url: str, folder: Path) -> None:
    import litellm
    from openinference.instrumentation.openai import OpenAIInstrumentor
    from opentelemetry import trace
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import ConsoleSpanExporter, SimpleSpanProcessor
    provider = TracerProvider(resource=Resource.create({"service.name": "weather-desk"}))
    handle = (folder / "console_litellm_openinference.json").open("w")
    provider.add_span_processor(SimpleSpanProcessor(ConsoleSpanExporter(out=handle)))
    ended = Ended("litellm_request")
    provider.add_span_processor(ended)
    trace.set_tracer_provider(provider)  # LiteLLM's callback takes the global provider when there is one
    OpenAIInstrumentor().instrument(tracer_provider=provider)
    litellm.callbacks = ["otel"]
    try:
        with provider.get_tracer("weather-desk").start_as_current_span("agent run"):
            conversation(url, new_time_on_round=3)
        ended.wait(4, 120)
    finally:
        provider.shutdown()
        handle.close()

if __name__ == "__main__":
    main(sys.argv[1], Path(sys.argv[2]))
