"""Writes ``console_openinference_cache_key.json`` with the real tools, never by hand: OpenInference around the
OpenAI SDK calling the embedded llama-server, as `generate.py` does, for an agent that rotates its
``prompt_cache_key`` on round 3 (the messages kept): the change the doctor must find in ``llm.invocation_parameters``.

Rerun: ``.venv/bin/python tests/data/doctor/traces/sdk/params.py`` (about half a minute).
"""

from __future__ import annotations

from pathlib import Path

from generate import HERE, QUESTIONS, SYSTEM, TOOLS, traced


def conversation(client) -> None:
    """Four rounds of one conversation, each appending the answer and a question; round 3 on sends a new
    ``prompt_cache_key`` (OpenAI routes a request by it, so the cache it reaches is another)."""
    messages = [{"role": "system", "content": SYSTEM.format(time="18:00")}, {"role": "user", "content": "Hi?"}]
    for number in range(1, 5):
        answer = client.chat.completions.create(model="smollm2", messages=messages, tools=TOOLS, max_tokens=4,
                                                temperature=0,
                                                prompt_cache_key="weather-desk-a" if number < 3 else "weather-desk-b")
        if number <= len(QUESTIONS):
            messages += [{"role": "assistant", "content": answer.choices[0].message.content or ""},
                         {"role": "user", "content": QUESTIONS[number - 1]}]


def main() -> None:
    import openai
    from opentelemetry.sdk.trace.export import ConsoleSpanExporter

    from core.engine.server import LocalServer
    with LocalServer(context=4096, log_dir=Path("/tmp")) as server, \
            (HERE / "console_openinference_cache_key.json").open("w") as out:
        client = openai.OpenAI(base_url=server.url + "/v1", api_key="not-needed", max_retries=0, timeout=300)
        traced(["openinference"], [ConsoleSpanExporter(out=out)], lambda: conversation(client))


if __name__ == "__main__":
    main()
