"""Phoenix's answers and OpenInference's spans as the tools wrote them around OpenAI-SDK calls to the embedded
llama-server (tests/data/doctor/traces/phoenix/calls.py, byte for byte): a real Phoenix server's REST spans page,
its client's span list and spans dataframe saved with ``DataFrame.to_json`` (records, one per line, pandas' default
column layout) and as Parquet (``DataFrame.to_parquet``, ``TraceDataset.save()``), and the OpenTelemetry SDK's
console output of the same spans. The script sets up which round breaks
(a new time in the system prompt from round 3) and which project hides its inputs."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from core import doctor
from core.doctor import parquet, traces
from core.doctor.spans import FRAME_ID
from core.words import ContentWords, Sentence, in_words

PHOENIX = Path(__file__).resolve().parents[2] / "data" / "doctor" / "traces" / "phoenix"
NO_FINDING = (False, doctor.NONE, None, None)


def _analyse(name: str) -> tuple[doctor.Transcript, doctor.Analysis]:
    transcript = doctor.load_paths([PHOENIX / name])
    assert transcript.kind == "trace" and not transcript.errors and not transcript.unused, transcript.errors
    assert transcript.notes[0].startswith("read as a trace (OpenInference): 4 LLM spans, one round each, from 1 "
                                          "trace ("), transcript.notes[0]
    return transcript, doctor.analyse(transcript)


@pytest.mark.parametrize("name", ["break_rest_page.json", "break_dataframe.json", "break_dataframe.jsonl",
                                  "console_openinference_break.json", "break_dataframe.parquet",
                                  "break_trace_dataset.parquet"])
def test_the_break_on_round_3_is_found_in_every_layout(name):
    """The same four calls read alike from Phoenix's REST page (``span_kind`` moved out of the attributes), its
    dataframe (``attributes.llm.input_messages`` a list of ``{"message.role": ...}`` objects, times in ms, rows
    newest first; as Parquet a list of structs, times as timestamps) and the SDK's console output: messages, tools,
    the server's own cached counts, the break."""
    transcript, analysis = _analyse(name)
    assert [len(r.messages) for r in transcript.rounds] == [2, 4, 6, 8]
    assert [r.tool_names() for r in transcript.rounds] == [["get_weather"]] * 4
    assert [r.model for r in transcript.rounds] == ["smollm2"] * 4  # llm.invocation_parameters' model
    assert [(f.breaks_cache, f.cause, f.message_index, f.field) for f in analysis.findings] == [
        NO_FINDING, NO_FINDING, (True, doctor.TIMESTAMP, 0, "content"), NO_FINDING]
    cached = [r.measured.cached_tokens for r in transcript.rounds if r.measured]
    assert len(cached) == 4 and cached[2] < cached[1] < cached[3]  # llm.token_count.prompt_details.cache_read


@pytest.mark.parametrize("name", ["no_break_dataframe.json", "no_break_spans.json", "no_break_dataframe.parquet",
                                  "no_break_trace_dataset.parquet"])
def test_without_a_break_every_round_is_compared(name):
    """pandas' default layout (one object per column, keyed by span id), the client's span list, and the
    dataframe as Parquet (NaN where a span has no such attribute, as JSON's null)."""
    transcript, analysis = _analyse(name)
    assert [f.cause for f in analysis.findings] == [doctor.NONE] * 4
    assert all(f.common_prefix_chars > 0 and not f.not_compared for f in analysis.findings[1:])


def test_hidden_inputs_are_named_per_round_and_nothing_is_compared():
    """OpenInference's ``hide_inputs``: ``input.value`` is ``__REDACTED__`` and no message is recorded. Each round
    says so and gets no verdict; the usage is still there, but no all-clear is given."""
    transcript, analysis = _analyse("hidden_inputs_rest_page.json")
    assert [f.cause for f in analysis.findings] == [doctor.NOT_COMPARED] * 4
    assert all(r.source.startswith("hidden_inputs_rest_page.json span ") for r in transcript.rounds)
    assert all(r.gap == "input.value is redacted (__REDACTED__) and the span holds no llm.input_messages: the "
               "instrumentation hides its inputs (OpenInference's hide_inputs, OPENINFERENCE_HIDE_INPUTS)"
               for r in transcript.rounds)
    assert "4 of 4 spans do not hold their whole prompt: those rounds get no verdict" in transcript.notes


def test_a_trace_without_an_llm_span_says_what_it_holds_and_what_was_looked_for(tmp_path):
    """Phoenix's real page with its LLM spans taken out (as a project that traced only its agent would export):
    no round, and the error names the file, the spans it holds and every convention looked for."""
    page = json.loads((PHOENIX / "break_rest_page.json").read_text())
    page["data"] = [span for span in page["data"] if span["span_kind"] != "LLM"]
    path = tmp_path / "agent_only.json"
    path.write_text(json.dumps(page))
    transcript = doctor.load_paths([path])
    assert transcript.rounds == [] and doctor.comparison(transcript, path.name).kind == doctor.UNREAD
    assert transcript.errors == [
        "agent_only.json holds 1 span ('agent run') and no LLM call in a convention the doctor reads (looked for "
        f"{traces.LOOKED_FOR_CALLS}): export the spans of the model calls, with their content captured"]
    assert "MLflow's mlflow.spanType CHAT_MODEL or LLM" in traces.LOOKED_FOR_CALLS


def _refused(files: list[tuple[str, bytes]], max_bytes: int = doctor.MAX_DOCTOR_BYTES) -> tuple[str, str]:
    """The sentence a Parquet input is refused with, in English and in Chinese."""
    with pytest.raises(doctor.TranscriptError) as refused:
        doctor.load_inputs(files, max_bytes)
    sentence = refused.value.args[0]
    assert isinstance(sentence, Sentence)
    return sentence, in_words(sentence, ContentWords("zh"))


def test_a_parquet_file_cut_short_is_refused_with_a_sentence_naming_it(tmp_path):
    """A download cut mid-way: the footer (and the closing PAR1) is gone; the file is named, never a traceback."""
    data = (PHOENIX / "break_dataframe.parquet").read_bytes()
    cut = tmp_path / "spans.parquet"
    cut.write_bytes(data[:len(data) // 2])
    english, chinese = _refused([doctor.read_path(cut)])
    assert english.startswith("spans.parquet starts as a Parquet file but cannot be read as one (")
    assert "it may be cut short or damaged" in english
    assert chinese.startswith("spans.parquet 以 Parquet 文件开头，却无法按 Parquet 读取")


def test_a_parquet_table_that_is_no_span_table_names_the_missing_column(tmp_path):
    path = tmp_path / "scores.parquet"
    pq.write_table(pa.table({"question": ["Sky?"], "score": [0.5]}), path)
    english, chinese = _refused([doctor.read_path(path)])
    assert english.startswith("scores.parquet is a Parquet table but not a spans dataframe: it has no "
                              "context.span_id column (its columns: question, score)")
    assert "没有 context.span_id 列" in chinese


def test_a_parquet_table_is_bounded_by_its_rows_and_by_what_it_unpacks_to(tmp_path, monkeypatch):
    """A small file whose columns unpack to more than the doctor reads (a compression bomb) is refused from its
    footer, before anything is unpacked; so is one of more rows than `parquet.MAX_ROWS`."""
    path = tmp_path / "bomb.parquet"
    pq.write_table(pa.table({FRAME_ID: [f"{n:016x}" for n in range(4)],
                             "attributes.input.value": [str(n) * 2**20 for n in range(4)]}), path,
                   compression="zstd")
    assert path.stat().st_size < 2**20
    english, _ = _refused([doctor.read_path(path)], max_bytes=2**20)
    assert english.startswith("bomb.parquet is a Parquet table of 4 rows unpacking to 4 MB; the doctor reads at "
                              "most 500,000 rows and 1 MB")
    monkeypatch.setattr(parquet, "MAX_ROWS", 3)
    english, _ = _refused([doctor.read_path(PHOENIX / "break_dataframe.parquet")])
    assert english.startswith("break_dataframe.parquet is a Parquet table of 5 rows")


def test_a_parquet_file_is_read_alone():
    english, _ = _refused([doctor.read_path(PHOENIX / "break_dataframe.parquet"),
                           doctor.read_path(PHOENIX / "break_dataframe.json")])
    assert english == "break_dataframe.parquet is a Parquet file: give it alone (the doctor reads one trace export " \
        "at a time)"
