"""Run by `../against_llama.py` in Phoenix's environment: starts ``phoenix serve`` on 127.0.0.1 (a temporary working
folder), sends an agent's conversations to it through OpenInference's OpenAI instrumentation, and writes what
Phoenix gives back. Arguments: the llama-server's URL and the folder to write to.

Writes this folder's traces with the real tools, never by hand: `calls.py` (the OpenAI SDK instrumented by
OpenInference, openinference-instrumentation-openai, sending its spans to a real Phoenix server, arize-phoenix, run
on 127.0.0.1, and to the OpenTelemetry SDK's ``ConsoleSpanExporter``) against the embedded llama-server (SmolLM2,
`core.engine.server.LocalServer`). Phoenix's own answers are written as they came: its REST spans page byte for
byte, and its client's spans dataframe and span list saved the ways its documentation shows: as JSON
(``DataFrame.to_json``), as Parquet (``DataFrame.to_parquet``, pandas' default engine pyarrow) and as Phoenix's own
``TraceDataset(dataframe).save()`` Parquet file (renamed from ``trace_dataset-<uuid>.parquet``). The Parquet files
were written with arize-phoenix 20.26.1, openinference-instrumentation-openai 0.1.66, openai 3.63.0, pandas 3.1.1,
pyarrow 26.0.1 (the JSON ones before them, with the versions of their day).

Rerun: ``python3 -m venv /tmp/phoenix-venv && /tmp/phoenix-venv/bin/pip install arize-phoenix
openinference-instrumentation-openai openai`` then
``.venv/bin/python tests/data/doctor/traces/against_llama.py phoenix /tmp/phoenix-venv/bin/python`` (a few minutes).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import openai

SYSTEM = "You are a terse assistant for a weather desk. Answer in one word. The time is {time}."
TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "The weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]
QUESTIONS = ("Sky colour?", "Grass colour?", "Snow colour?")


def conversation(client: openai.OpenAI, new_time_on_round: int | None) -> None:
    """Four rounds of one conversation, each appending the answer and a question; from ``new_time_on_round`` on
    (counting from 1) the system prompt carries a new time: a real cache break there."""
    messages = [{"role": "system", "content": SYSTEM.format(time="18:00")}, {"role": "user", "content": "Hi?"}]
    for number in range(1, 5):
        if new_time_on_round is not None and number >= new_time_on_round:
            messages[0]["content"] = SYSTEM.format(time="18:05")
        answer = client.chat.completions.create(model="smollm2", messages=messages, tools=TOOLS, max_tokens=4,
                                                temperature=0)
        if number <= len(QUESTIONS):
            messages += [{"role": "assistant", "content": answer.choices[0].message.content or ""},
                         {"role": "user", "content": QUESTIONS[number - 1]}]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start_phoenix() -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    env = {**os.environ, "PHOENIX_WORKING_DIR": tempfile.mkdtemp(prefix="phoenix-"), "PHOENIX_PORT": str(port),
           "PHOENIX_GRPC_PORT": str(free_port()), "PHOENIX_HOST": "127.0.0.1", "PHOENIX_TELEMETRY_ENABLED": "false"}
    process = subprocess.Popen([str(Path(sys.executable).parent / "phoenix"), "serve"], env=env,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        try:
            if httpx.get(url + "/healthz", timeout=5).status_code == 200:
                return process, url
        except httpx.HTTPError:
            pass
        if process.poll() is not None:
            raise SystemExit(f"phoenix serve exited with {process.returncode}")
        time.sleep(1)
    process.kill()
    raise SystemExit("phoenix serve did not answer /healthz in 300 s")


def traced(project: str, phoenix: str, llama: str, console: Path | None, hide_inputs: bool,
           new_time_on_round: int | None) -> None:
    """One conversation under an ``agent run`` span, sent to Phoenix's project ``project`` (and to ``console``)."""
    from openinference.instrumentation import TraceConfig
    from openinference.instrumentation.openai import OpenAIInstrumentor
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import ConsoleSpanExporter, SimpleSpanProcessor
    provider = TracerProvider(resource=Resource.create({"service.name": "weather-desk",
                                                        "openinference.project.name": project}))
    provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(endpoint=phoenix + "/v1/traces")))
    handle = console.open("w") if console else None
    if handle:
        provider.add_span_processor(SimpleSpanProcessor(ConsoleSpanExporter(out=handle)))
    instrumentor = OpenAIInstrumentor()
    instrumentor.instrument(tracer_provider=provider, config=TraceConfig(hide_inputs=hide_inputs))
    try:
        client = openai.OpenAI(base_url=llama + "/v1", api_key="not-needed", max_retries=0, timeout=300)
        with provider.get_tracer("weather-desk").start_as_current_span("agent run"):
            conversation(client, new_time_on_round)
    finally:
        instrumentor.uninstrument()
        provider.shutdown()
        if handle:
            handle.close()


def export(phoenix: str, project: str, folder: Path, expected: int, saved: dict[str, Callable[[Any], None]]) -> None:
    """What Phoenix gives back for one project, written as it came by each of ``saved`` (name: writer): its REST
    spans page (the bytes), its client's spans dataframe (``DataFrame.to_json``, ``to_parquet``, or
    `save_dataset`) or span list (``json.dump``)."""
    from phoenix.client import Client
    client = Client(base_url=phoenix)
    deadline = time.monotonic() + 120
    while len(client.spans.get_spans(project_identifier=project, limit=100)) < expected:  # ingestion is async
        if time.monotonic() > deadline:
            raise SystemExit(f"Phoenix holds fewer than {expected} spans of {project} after 120 s")
        time.sleep(1)
    sources = {"page": lambda: httpx.get(f"{phoenix}/v1/projects/{project}/spans", params={"limit": 100},
                                         timeout=60).raise_for_status().content,
               "frame": lambda: client.spans.get_spans_dataframe(project_identifier=project),
               "spans": lambda: client.spans.get_spans(project_identifier=project, limit=100)}
    for name, write in saved.items():
        write(sources[name.split(":", 1)[0]]())


def save_dataset(frame: Any, path: Path) -> None:
    """The dataframe as Phoenix saves a trace dataset (``TraceDataset.save``: a Parquet file named by its id, with
    Phoenix's metadata), moved to ``path``."""
    from phoenix.trace import TraceDataset
    with tempfile.TemporaryDirectory() as directory:
        dataset_id = TraceDataset(frame).save(directory)
        (Path(directory) / f"trace_dataset-{dataset_id}.parquet").replace(path)


def main(llama: str, folder: Path) -> None:
    process, phoenix = start_phoenix()
    try:
        traced("weather-break", phoenix, llama, folder / "console_openinference_break.json", False, 3)
        export(phoenix, "weather-break", folder, 5, {
            "page": lambda content: (folder / "break_rest_page.json").write_bytes(content),
            "frame:records": lambda frame: frame.to_json(folder / "break_dataframe.json", orient="records"),
            "frame:lines": lambda frame: frame.to_json(folder / "break_dataframe.jsonl", orient="records",
                                                       lines=True),
            "frame:parquet": lambda frame: frame.to_parquet(folder / "break_dataframe.parquet"),
            "frame:dataset": lambda frame: save_dataset(frame, folder / "break_trace_dataset.parquet")})
        traced("weather-kept", phoenix, llama, None, False, None)
        export(phoenix, "weather-kept", folder, 5, {
            "frame": lambda frame: frame.to_json(folder / "no_break_dataframe.json"),  # pandas' default layout
            "spans": lambda spans: (folder / "no_break_spans.json").write_text(json.dumps(spans, indent=2)),
            "frame:parquet": lambda frame: frame.to_parquet(folder / "no_break_dataframe.parquet"),
            "frame:dataset": lambda frame: save_dataset(frame, folder / "no_break_trace_dataset.parquet")})
        traced("weather-hidden", phoenix, llama, None, True, None)
        export(phoenix, "weather-hidden", folder, 5, {
            "page": lambda content: (folder / "hidden_inputs_rest_page.json").write_bytes(content)})
    finally:
        process.terminate()
        process.wait(timeout=60)


if __name__ == "__main__":
    main(sys.argv[1], Path(sys.argv[2]))
