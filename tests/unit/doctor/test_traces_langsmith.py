"""LangSmith's runs read as rounds: two real o1-mini calls the LangSmith SDK recorded through ``wrap_openai``
(langchain-ai/langsmith-sdk's integration test data: the run as created, then as patched with its outputs),
merged here into the run objects ``Client.list_runs`` returns (tests/data/README.md says how)."""

from __future__ import annotations

import json
from pathlib import Path

from core import doctor
from core.doctor import exports

LANGSMITH = Path(__file__).resolve().parents[2] / "data" / "doctor" / "traces" / "langsmith"
PROMPT = ("Write a bash script that takes a matrix represented as a string with format '[1,2],[3,4],[5,6]' and "
          "prints the transpose in the same format.")


def test_llm_runs_read_with_the_model_and_the_cached_tokens():
    transcript = doctor.load_paths([LANGSMITH / "wrap_openai_o1_mini_runs.json"])
    assert transcript.kind == "trace" and not transcript.errors
    assert "read as a LangSmith export: 2 LLM runs, one round each, from 2 traces (no session ids)" in \
        transcript.notes[0]
    assert [r.chat for r in transcript.rounds] == [[{"role": "user", "content": PROMPT}]] * 2
    assert [r.model for r in transcript.rounds] == ["o1-mini"] * 2
    assert [(r.measured.prompt_tokens, r.measured.cached_tokens) for r in transcript.rounds if r.measured] == [
        (43, 0), (43, 0)]
    analysis = doctor.analyse(transcript)
    # two traces, one prompt: the second round starts another conversation with the whole same prompt
    assert not any(f.breaks_cache for f in analysis.findings)


def test_a_thread_id_in_the_metadata_makes_one_conversation(tmp_path):
    """LangSmith's ``session_id`` is the project; a conversation is the thread its metadata names."""
    runs = json.loads((LANGSMITH / "wrap_openai_o1_mini_runs.json").read_text())
    for run in runs:
        run["extra"]["metadata"]["thread_id"] = "thread-1"
    path = tmp_path / "runs.jsonl"
    path.write_text("".join(json.dumps(run) + "\n" for run in runs))
    transcript = doctor.load_paths([path])
    assert "from 2 traces in 1 session," in transcript.notes[0]
    assert [r.time.minute for r in transcript.rounds if r.time] == [50, 2]


def test_a_run_with_no_messages_is_left_out_and_said():
    """A record with no request (a lifecycle record) is no round: left out, and the notes say how many."""
    runs = json.loads((LANGSMITH / "wrap_openai_o1_mini_runs.json").read_text())
    runs[0]["inputs"] = {"model": "o1-mini"}
    transcript = exports.read_documents(exports.LANGSMITH, [("runs", runs)])
    assert len(transcript.rounds) == 1 and transcript.rounds[0].gap is None
    assert "1 LLM run holds no input (a record of a call's lifecycle" in " ".join(transcript.notes)
