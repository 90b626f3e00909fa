"""Inputs to try the doctor on, one click away: a real agent log and a real trace from public recordings
(``samples/doctor/README.md`` says where each came from), and the sentence that lists what the doctor reads."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

SAMPLES_DIR = Path(__file__).resolve().parents[2] / "samples" / "doctor"
READ_FORMATS = ("request logs (JSONL, or a JSON array: Chat Completions, OpenAI Responses, Anthropic Messages or "
                "Gemini bodies, bare or wrapped with their response; the capture proxy's log), one text file per "
                "round; traces: OTLP JSON (the collector's file exporter, Jaeger, Tempo), the OpenTelemetry SDK's "
                "span JSON (the console exporter's output, a list, one span per line; the JS SDK's span records), with "
                "OpenInference, GenAI, OpenLLMetry or Vercel AI SDK attributes; Phoenix (REST spans pages, the "
                "client's span list, its spans dataframe saved as JSON, JSONL or Parquet, a TraceDataset.save() "
                "file); MLflow (Trace.to_json()); Pydantic Logfire's spans (GenAI attributes or request_data); "
                "Langfuse "
                "(trace download, public API traces and observations pages, observation exports as JSON or JSONL); "
                "LangSmith runs")


@dataclass(frozen=True)
class Sample:
    """One sample: its name (its words are ``doctor.sample_<name>`` and ``doctor.sample_<name>_source``) and file."""

    name: str
    file: str

    def read(self) -> tuple[str, bytes]:
        return self.file, (SAMPLES_DIR / self.file).read_bytes()


SAMPLES = (Sample("agent_log", "crewai_hierarchical_process.jsonl"),
           Sample("trace", "langfuse_csharp_agent_gemini.trace.json"))
