"""Run by `generate.py` in LiteLLM's environment: an agent's conversation through ``litellm.completion`` (which
calls the OpenAI SDK) with LiteLLM's ``otel`` callback and OpenInference's OpenAI instrumentation on one tracer
provider, written by ``ConsoleSpanExporter``. Arguments: the llama-server's URL and the folder to write to."""

from __future__ import annotations

import os
import sys
from pathlib import Path

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
    trace.set_tracer_provider(provider)  # LiteLLM's callback takes the global provider when there is one
    OpenAIInstrumentor().instrument(tracer_provider=provider)
    litellm.callbacks = ["otel"]
    try:
        with provider.get_tracer("weather-desk").start_as_current_span("agent run"):
            conversation(url, new_time_on_round=3)
    finally:
        provider.shutdown()
        handle.close()


if __name__ == "__main__":
    main(sys.argv[1], Path(sys.argv[2]))
