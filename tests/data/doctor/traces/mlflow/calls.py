"""Run by `../against_llama.py` in MLflow's environment: an agent's conversation through the OpenAI SDK with
``mlflow.openai.autolog()``, each trace written by MLflow as ``Trace.to_json()``. Arguments: the server's URL and
the folder to write to.

Writes this folder's traces with the real tools, never by hand: `calls.py` (MLflow's ``mlflow.openai.autolog()``
around the OpenAI SDK, in a virtual environment of its own) against the embedded llama-server (SmolLM2,
`core.engine.server.LocalServer`); MLflow's own ``Trace.to_json()`` writes each file.

Rerun: ``python3 -m venv /tmp/mlflow-venv && /tmp/mlflow-venv/bin/pip install mlflow-skinny openai`` then
``.venv/bin/python tests/data/doctor/traces/against_llama.py mlflow /tmp/mlflow-venv/bin/python`` (about a minute).
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

# a folder store, so no database server is needed (MLflow 3 asks for this opt-in to keep using one)
os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")

import mlflow  # noqa: E402
import openai  # noqa: E402

SYSTEM = "You are a terse assistant for a weather desk. Answer in one word. The time is {time}."
TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "The weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]
QUESTIONS = ("Sky colour?", "Grass colour?", "Snow colour?")


def conversation(client: openai.OpenAI, new_time_on_round: int | None) -> None:
    """Four rounds of one conversation in one trace, each appending the answer and a question; from
    ``new_time_on_round`` on (counting from 1) the system prompt carries a new time: a real cache break there."""
    messages = [{"role": "system", "content": SYSTEM.format(time="18:00")}, {"role": "user", "content": "Hi?"}]
    with mlflow.start_span("agent run"):
        for number in range(1, 5):
            if new_time_on_round is not None and number >= new_time_on_round:
                messages[0]["content"] = SYSTEM.format(time="18:05")
            answer = client.chat.completions.create(model="smollm2", messages=messages, tools=TOOLS, max_tokens=4,
                                                    temperature=0)
            if number <= len(QUESTIONS):
                messages += [{"role": "assistant", "content": answer.choices[0].message.content or ""},
                             {"role": "user", "content": QUESTIONS[number - 1]}]


def text_llm_span() -> None:
    """A hand-instrumented LLM span whose input is a prompt string, not messages (``@mlflow.trace`` on a function
    that calls a model its own way): nothing to compare, and the doctor must say so."""
    for question in ("Sky colour?", "Grass colour?"):
        with mlflow.start_span("complete", span_type="LLM") as span:
            span.set_inputs({"prompt": f"Answer in one word. {question}"})
            span.set_outputs({"text": "Blue"})


def write(name: str, folder: Path) -> None:
    trace = mlflow.get_trace(mlflow.get_last_active_trace_id(), flush=True)
    (folder / name).write_text(trace.to_json())


def main(url: str, folder: Path) -> None:
    mlflow.set_tracking_uri(Path(tempfile.mkdtemp(prefix="mlruns-")).as_uri())
    mlflow.set_experiment("weather-desk")
    mlflow.openai.autolog()
    client = openai.OpenAI(base_url=url + "/v1", api_key="not-needed", max_retries=0, timeout=300)
    conversation(client, new_time_on_round=3)
    write("trace_break.json", folder)
    conversation(client, new_time_on_round=None)
    write("trace_no_break.json", folder)
    with mlflow.start_span("agent run"):
        text_llm_span()
    write("trace_text_prompt.json", folder)


if __name__ == "__main__":
    main(sys.argv[1], Path(sys.argv[2]))
