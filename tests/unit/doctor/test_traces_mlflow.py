"""MLflow's traces as ``Trace.to_json()`` wrote them around ``mlflow.openai.autolog()`` calls to the embedded
llama-server (tests/data/doctor/traces/mlflow/calls.py, byte for byte): every attribute a JSON string, the request
body in ``mlflow.spanInputs``, the usage in ``mlflow.chat.tokenUsage``. The script sets up which round breaks."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from core import doctor

MLFLOW = Path(__file__).resolve().parents[2] / "data" / "doctor" / "traces" / "mlflow"


def _analyse(name: str) -> tuple[doctor.Transcript, doctor.Analysis]:
    transcript = doctor.load_paths([MLFLOW / name])
    assert transcript.kind == "trace" and not transcript.errors and not transcript.unused, transcript.errors
    return transcript, doctor.analyse(transcript)


def test_the_new_time_on_round_3_is_found_in_message_0_with_mlflows_own_counts():
    transcript, analysis = _analyse("trace_break.json")
    assert transcript.notes[0].startswith("read as a trace (MLflow (mlflow.spanInputs)): 4 LLM spans, one round each")
    assert [len(r.messages) for r in transcript.rounds] == [2, 4, 6, 8]
    assert [r.tool_names() for r in transcript.rounds] == [["get_weather"]] * 4
    assert [(f.breaks_cache, f.cause, f.message_index, f.field) for f in analysis.findings] == [
        (False, doctor.NONE, None, None), (False, doctor.NONE, None, None), (True, doctor.TIMESTAMP, 0, "content"),
        (False, doctor.NONE, None, None)]
    measured = [r.measured for r in transcript.rounds]
    assert all(m is not None and m.source == "cache_read_input_tokens" for m in measured)
    cached = [m.cached_tokens for m in measured if m]
    assert cached[2] < cached[1] < cached[3]  # the server's own cache stopped at the system prompt on round 3


def test_without_a_break_every_round_is_compared():
    transcript, analysis = _analyse("trace_no_break.json")
    assert [f.cause for f in analysis.findings] == [doctor.NONE] * 4
    assert all(f.common_prefix_chars > 0 and not f.not_compared for f in analysis.findings[1:])


def test_an_llm_span_whose_input_is_no_request_is_named_and_not_compared():
    """A function traced as an LLM span (``span_type="LLM"``, inputs ``{"prompt": ...}``): each round names the
    span and the attribute, and gets no verdict, never an all-clear."""
    transcript, analysis = _analyse("trace_text_prompt.json")
    assert [f.cause for f in analysis.findings] == [doctor.NOT_COMPARED] * 2
    assert all(r.source.startswith("trace_text_prompt.json span ") for r in transcript.rounds)
    assert all(r.gap == "mlflow.spanInputs holds the keys ['prompt'], not a request's messages (a function traced "
               "as an LLM span, whose prompt is its own): nothing to compare" for r in transcript.rounds)


@pytest.mark.slow
@pytest.mark.parametrize("path", [MLFLOW / "trace_break.json", MLFLOW.parent / "phoenix" / "break_dataframe.json",
                                  MLFLOW.parent / "siblings" / "console_litellm_openinference.json"])
def test_the_cli_fails_on_the_break_in_each_new_trace_format(path):
    """``doctor --fail-on-break`` on an MLflow trace, Phoenix's dataframe and sibling spans, as exported: exit 1
    and the break named at round 3, message 0."""
    proc = subprocess.run([sys.executable, "-m", "core", "doctor", "--fail-on-break", str(path)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1, proc.stderr
    assert proc.stdout.strip().splitlines()[-1].startswith("FAIL: 1 round(s) break the prompt cache; first: ")
    assert "round 3: timestamp in message 0" in proc.stdout
