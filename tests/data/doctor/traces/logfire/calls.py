"""Run by `../against_llama.py` in Logfire's environment: an agent's conversation through the OpenAI SDK with
``logfire.instrument_openai()``, Logfire configured with ``send_to_logfire=False``, its console output written to
``logfire_console.txt`` and the OpenTelemetry SDK's ``ConsoleSpanExporter`` added as a span processor (one file per
conversation). Arguments: the server's URL and the folder to write to.

Writes this folder's traces with the real tools, never by hand: `calls.py` (``logfire.instrument_openai()`` around
the OpenAI SDK, in a virtual environment of its own) against the embedded llama-server (SmolLM2,
`core.engine.server.LocalServer`); Logfire (``send_to_logfire=False``) writes its console lines and the
OpenTelemetry SDK's ``ConsoleSpanExporter`` the spans.

Rerun: ``python3 -m venv /tmp/logfire-venv && /tmp/logfire-venv/bin/pip install logfire openai`` then
``.venv/bin/python tests/data/doctor/traces/against_llama.py logfire /tmp/logfire-venv/bin/python`` (about a minute).
"""

from __future__ import annotations

import sys
from pathlib import Path

import logfire
import openai
from opentelemetry.sdk.trace.export import ConsoleSpanExporter, SimpleSpanProcessor

SYSTEM = "You are a terse assistant for a weather desk. Answer in one word. The time is {time}."
TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "The weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]
QUESTIONS = ("Sky colour?", "Grass colour?", "Snow colour?")


def conversation(client: openai.OpenAI, new_time_on_round: int | None, new_time: str = "") -> None:
    """Four rounds of one conversation in one trace, each appending the answer and a question; from
    ``new_time_on_round`` on (counting from 1) the system prompt carries ``new_time``: a real cache break there (a
    time no earlier conversation used, so the server holds no copy of the new prompt)."""
    messages = [{"role": "system", "content": SYSTEM.format(time="18:00")}, {"role": "user", "content": "Hi?"}]
    with logfire.span("agent run"):
        for number in range(1, 5):
            if new_time_on_round is not None and number >= new_time_on_round:
                messages[0]["content"] = SYSTEM.format(time=new_time)
            answer = client.chat.completions.create(model="smollm2", messages=messages, tools=TOOLS, max_tokens=4,
                                                    temperature=0)
            if number <= len(QUESTIONS):
                messages += [{"role": "assistant", "content": answer.choices[0].message.content or ""},
                             {"role": "user", "content": QUESTIONS[number - 1]}]


def main(url: str, folder: Path) -> None:
    exporter = ConsoleSpanExporter()
    with (folder / "logfire_console.txt").open("w") as console:
        logfire.configure(send_to_logfire=False, service_name="weather-desk",
                          console=logfire.ConsoleOptions(output=console),
                          additional_span_processors=[SimpleSpanProcessor(exporter)])
        client = openai.OpenAI(base_url=url + "/v1", api_key="not-needed", max_retries=0, timeout=300)
        # Logfire's default attributes (version 2: gen_ai.input.messages), then its older ones (version 1: the
        # whole request body in request_data)
        for name, version, new_time in (("console_break.json", 2, "18:05"), ("console_no_break.json", 2, None),
                                        ("console_request_data_break.json", 1, "18:10")):
            with (folder / name).open("w") as out, logfire.instrument_openai(client, version=version):
                exporter.out = out
                conversation(client, 3 if new_time else None, new_time or "")
                logfire.force_flush()


if __name__ == "__main__":
    main(sys.argv[1], Path(sys.argv[2]))
