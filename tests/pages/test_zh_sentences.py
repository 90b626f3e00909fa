"""No English sentence on the Chinese pages (AppTest): every page with its recorded run (and the roofline page with a
datasheet's roofs), the cache doctor with every log and trace under tests/data/doctor/ (the malformed, unreadable
and refused ones too), a run a hosted demo refuses, an upload experiment 3 cannot read and experiment 6 refused
on an API, exports the Saved runs page refuses to import, and runs whose rounds a server refused (401, 500) or
could not reach (a closed port), with the sidebar's check of a llama-server that is not there.

How a sentence is read: `tests.support.english.english`.
"""

from __future__ import annotations

import pytest
from streamlit.testing.v1 import AppTest

from core.engine.server import free_port
from core.experiments import EXPERIMENTS
from core.runs.runner import BackgroundRun
from tests.support.apptest import ROOT, api_state, app
from tests.support.english import english
from ui.navigation import PAGES

pytestmark = pytest.mark.slow

DOCTOR = ROOT / "tests" / "data" / "doctor"
SKIPPED_FIELDS = {"id", "form_id", "spec", "icon", "type", "format", "css", "url", "key"}


def texts(at: AppTest) -> list[str]:
    """Every string the page sent: its elements' text fields, its tables' headers and cells."""
    found: list[str] = []

    def fields(message) -> None:  # type: ignore[no-untyped-def]
        for field, value in message.ListFields():
            if field.name in SKIPPED_FIELDS:
                continue
            values = value if isinstance(value, (list, tuple)) or type(value).__name__.startswith("Repeated") \
                else [value]
            for item in values:
                if field.type == field.TYPE_MESSAGE:
                    fields(item)
                elif field.type == field.TYPE_STRING:
                    found.append(item)

    def walk(node) -> None:  # type: ignore[no-untyped-def]
        if getattr(node, "proto", None) is not None:
            fields(node.proto)
        children = getattr(node, "children", None) or {}
        for child in (children.values() if isinstance(children, dict) else children):
            walk(child)

    walk(at._tree)
    for table in at.dataframe:
        frame = table.value
        found += [str(c) for c in frame.columns]
        found += [str(v) for c in frame.columns if frame[c].dtype == object for v in frame[c]]
    return found


def english_on(at: AppTest) -> list[str]:
    assert not at.exception, at.exception
    return [f"{run!r} in {text[:160]!r}" for text in texts(at) for run in english(text)]


def test_the_reading_of_a_sentence():
    assert english("这份日志混用了多种格式（the lines of this log show more than one format）") == [
        "the lines of this log show more than one format"]
    assert english("按 Anthropic Messages API 读取；第 2 轮：`gen_ai.input.messages is not whole JSON`") == []
    assert english("值 “You are a travel agent” 变成了 'ou are a terse assistant'，gpt-4o-mini，8 个LLM span") == []
    assert english("Choose fewer rounds.") == ["Choose fewer rounds"]



def recorded_history() -> dict[str, list[BackgroundRun]]:
    history = {}
    for spec in EXPERIMENTS.values():
        if spec.sample is not None:
            settings, rows = spec.recorded()
            history[spec.id] = [BackgroundRun.recorded(spec.id, {**settings, "recorded": True}, rows, "recorded")]
    return history


def test_every_page_with_its_recorded_run_speaks_chinese(fake_api):
    history = recorded_history()
    assert len(history) >= 7
    found = []
    for page in PAGES:
        at = app(lang="zh", history=history)
        at.run()
        at.switch_page(page.path).run()
        found += [f"{page.path}: {finding}" for finding in english_on(at)]
    at = app(**api_state(fake_api), lang="zh", roofline_accelerator="NVIDIA H100 SXM")  # roofs from a datasheet
    at.run()
    at.switch_page("app_pages/roofline.py").run()
    assert any("数据手册" in c.value for c in at.caption), [c.value for c in at.caption]
    assert found + english_on(at) == []


USAGE = b"\n".join((  # counts that cannot be used: not a number, more cached than prompt tokens; a key given twice
    b'{"request": {"model": "m", "messages": [{"role": "user", "content": "hi"}]}, '
    b'"response": {"usage": {"prompt_tokens": "many", "completion_tokens": 1}}}',
    b'{"request": {"model": "m", "model": "m", "messages": [{"role": "user", "content": "hi"}]}, '
    b'"response": {"usage": {"prompt_tokens": 10, "prompt_tokens_details": {"cached_tokens": 50}}}}'))


def doctor_inputs() -> list[tuple[str, bytes]]:
    """Every log and trace of the doctor's tests, and inputs it refuses: bytes that are not UTF-8, JSON cut short, a
    trace cut after its spans, a trace with no LLM call, a blank file, a binary one, a logger's prefix, UTF-16
    without its mark, a gzip file that is not one, usage that cannot be used."""
    files = [p for p in sorted(DOCTOR.rglob("*")) if p.suffix in (".json", ".jsonl", ".txt")]
    assert len(files) > 100 and any(p.parent.name == "traces" for p in files)
    spans = (DOCTOR / "traces" / "sdk" / "console_openinference.json").read_bytes()
    no_llm = b'{"resourceSpans": [{"scopeSpans": [{"spans": [{"traceId": "01", "spanId": "02", "name": "GET /"}]}]}]}'
    return [(p.name, p.read_bytes()) for p in files] + [
        ("latin1.jsonl", "\u00e9t\u00e9".encode("latin-1")), ("empty.json", b"{}"),
        ("broken.json", b'[{"messages": '), ("cut_trace.json", spans + b'\n{"name": '), ("no_llm.json", no_llm),
        ("blank.jsonl", b" \n"), ("binary.jsonl", b"{\x00}"), ("prefixed.jsonl", b'INFO {"messages": []}'),
        ("utf16.jsonl", '{"messages": []}'.encode("utf-16-le")), ("log.jsonl.gz", b"\x1f\x8b not gzip"),
        ("usage.jsonl", USAGE)]


def test_the_doctor_speaks_chinese_on_every_log_and_trace(fake_api):
    at = app(**api_state(fake_api), lang="zh")
    at.switch_page("app_pages/cache_doctor.py").run()
    found = []
    for name, data in doctor_inputs():
        at.file_uploader(key="doctor_files").upload(name, data, "application/json").run()
        found += [f"{name}: {finding}" for finding in english_on(at)]
    assert found == []


def test_refused_runs_are_said_in_chinese(fake_api):
    """A run over a hosted demo's limit, a document that is not UTF-8, and experiment 6 (which needs a llama-server)
    on an API."""
    at = app(**api_state(fake_api), lang="zh")
    for name, value in {"PREFILL_LAB_HOSTED": "true", "PREFILL_LAB_ALLOWED_BASE_URLS": fake_api.base_url,
                        "PREFILL_LAB_ALLOW_LOOPBACK": "true", "PREFILL_LAB_MAX_TOKENS_PER_RUN": "10"}.items():
        at.secrets[name] = value
    at.run()
    at.switch_page("app_pages/cache.py").run()
    at.button(key="run_cache").click().run()
    assert [e.proto.icon for e in at.error] == [":material/block:"]
    found = english_on(at)
    at.file_uploader(key="cache_upload").upload("notes.txt", "\u00e9t\u00e9".encode("latin-1"), "text/plain").run()
    assert any("UTF-8" in e.value for e in at.error)
    found += english_on(at)
    at = app(**api_state(fake_api), lang="zh")
    at.run()
    at.switch_page("app_pages/kv_cache.py").run()
    at.button(key="run_kv_cache").click().run()
    assert at.error, "experiment 6 is refused on an API"
    assert found + english_on(at) == []
    assert fake_api.requests == []


BAD_EXPORTS = {  # what the Saved runs page refuses to import, each said in the page's language
    "notes.json": b'{"title": "my notes"}',
    "future.json": b'{"run": {"format": 99}, "rounds": [{"round": 1}]}',
    "huge.json": b'{"rounds": [\n{"experiment": "cache", "round": 1, "strategy": "cold", "ttft_ms": 1e300}\n]}',
    "colour.json": b'{"rounds": [\n{"experiment": "cache", "round": 1, "colour": "red"}\n]}',
    "dates.json": b'{"run": {"started_at": -5}, "rounds": [{"experiment": "cache", "round": 1}]}',
    "latin1.json": "{\"rounds\": \"\u00e9t\u00e9\"}".encode("latin-1"),
    "cut.json": b'{"rounds": [',
}


def test_refused_imports_are_said_in_chinese(tmp_path):
    at = app(lang="zh")
    at.secrets["PREFILL_LAB_DB"] = str(tmp_path / "runs.sqlite")
    at.switch_page("app_pages/runs.py").run()
    found = []
    for name, data in BAD_EXPORTS.items():
        at.file_uploader(key="runs_import").upload(name, data, "application/json").run()
        assert any(name in e.value for e in at.error), (name, [e.value for e in at.error])
        found += [f"{name}: {finding}" for finding in english_on(at)]
    assert found == []


@pytest.mark.parametrize("fault", ["401", "500", "closed"])
def test_a_run_that_met_a_connection_error_is_said_in_chinese(fake_api, fault):
    """Round 1 measured, round 2 refused by the server (or every round unable to connect): the error rows, the
    table and the run's failure in Chinese; the server's and httpx's own words quoted."""
    state = api_state(fake_api)
    if fault == "closed":
        state["base_url"] = f"http://127.0.0.1:{free_port()}/v1"
    else:
        fake_api.fault, fake_api.fault_after = fault, 2  # the warm-up and round 1 succeed
    at = app(**state, lang="zh")
    at.switch_page("app_pages/output.py").run()
    at.multiselect(key="output_lengths").set_value([8, 16]).run()
    at.button(key="run_output").click().run()
    errors = [e for e in at.dataframe[0].value["error"] if e]
    assert errors and all(("HTTP " + fault if fault != "closed" else "无法连接") in e for e in errors), errors
    assert english_on(at) == []


def test_a_missing_llama_server_is_said_in_chinese():
    """The sidebar's check, and experiment 3's page, which prepares its document on the server."""
    at = app(backend="llama", llama_url=f"http://127.0.0.1:{free_port()}", lang="zh")
    at.run()
    assert any("未运行" in e.value for e in at.sidebar.error), [e.value for e in at.sidebar.error]
    found = english_on(at)
    at.switch_page("app_pages/cache.py").run()
    assert any("llama-server" in e.value for e in at.main.error), [e.value for e in at.main.error]
    assert found + english_on(at) == []
