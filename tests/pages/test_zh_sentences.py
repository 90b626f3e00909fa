"""No English sentence on the Chinese pages (AppTest): every page with its recorded run, the cache doctor with every
log and trace under tests/data/doctor/ (the malformed, unreadable and refused ones too), a run a hosted demo
refuses and one experiment 6 refuses on an API.

How a sentence is read (`english`): the text of every element the page sends (markdown, captions, alerts, metric
labels and values, button and widget labels, help and options, tab and expander labels, table headers and
cells) is cut into words at whitespace and at every non-ASCII character (a Chinese character ends a run), each
word's surrounding punctuation dropped; a run of three or more consecutive plain ASCII words (letters, an
apostrophe inside) is English. Not read as words: code spans in backticks, text quoted in “…” or '…' (the
visitor's own data, a parser's own message), the doctor's quoted prompt excerpts (``<pre>``), and names from
`NAMES` (formats, providers, presets). A file name, a field name (``gen_ai.input.messages``), a number with its
unit or a model name holds a digit, a dot, a slash, a hyphen or an underscore, so it is no word. Left out on
purpose, so still English: the roofline probe's method as its cache holds it, free text written by
`core.roofline.peaks` (``numpy float32 matmul, 2048x2048, best of 5, 2 threads``: `PROBE_METHOD`).
"""

from __future__ import annotations

import re

import pytest
from streamlit.testing.v1 import AppTest

from core.backends.presets import PRESETS
from core.experiments import EXPERIMENTS
from core.runs.runner import BackgroundRun
from tests.support.apptest import ROOT, api_state, app
from ui.navigation import PAGES

pytestmark = pytest.mark.slow

DOCTOR = ROOT / "tests" / "data" / "doctor"
NAMES = ["Anthropic Messages API", "Anthropic Messages", "Chat Completions", "OpenAI Responses", "Vercel AI SDK",
         "OpenTelemetry SDK", "OpenTelemetry GenAI", "chat completions", "anthropic messages",
         "gemini generateContent", "Mac Studio", *PRESETS]
PROBE_METHOD = re.compile(r"numpy float\d\d [^。]*")  # core.roofline.peaks.Ceiling.describe(), free text in a cache
QUOTED = re.compile(r"`[^`]*`|“[^”]*”|'[^'\n]*'")
WORD = re.compile(r"[A-Za-z]+(?:'[A-Za-z]+)?")
SKIPPED_FIELDS = {"id", "form_id", "spec", "icon", "type", "format", "css", "url", "key"}


def english(text: str) -> list[str]:
    """The runs of three or more English words in ``text`` (see the module's docstring)."""
    if text.lstrip().startswith("<pre"):
        return []
    text = QUOTED.sub(" · ", PROBE_METHOD.sub(" · ", text))
    for name in sorted(NAMES, key=len, reverse=True):
        text = text.replace(name, " · ")
    text = re.sub(r"[^\x00-\x7f]", " · ", text.replace("’", "'"))  # a Chinese character ends a run
    runs, run = [], []
    for token in text.split():
        word = token.strip(".,;:!?()[]{}\"*")
        if WORD.fullmatch(word):
            run.append(word)
            continue
        if len(run) >= 3:
            runs.append(" ".join(run))
        run = []
    return runs + ([" ".join(run)] if len(run) >= 3 else [])


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


def test_every_page_with_its_recorded_run_speaks_chinese():
    history = recorded_history()
    assert len(history) >= 7
    found = []
    for page in PAGES:
        at = app(lang="zh", history=history)
        at.run()
        at.switch_page(page.path).run()
        found += [f"{page.path}: {finding}" for finding in english_on(at)]
    assert found == []


def doctor_inputs() -> list[tuple[str, bytes]]:
    """Every log and trace of the doctor's tests, and inputs it refuses: bytes that are not UTF-8, JSON cut short, a
    trace cut after its spans, a trace with no LLM call."""
    files = [p for p in sorted(DOCTOR.rglob("*")) if p.suffix in (".json", ".jsonl", ".txt")]
    assert len(files) > 100 and any(p.parent.name == "traces" for p in files)
    spans = (DOCTOR / "traces" / "sdk" / "console_openinference.json").read_bytes()
    no_llm = b'{"resourceSpans": [{"scopeSpans": [{"spans": [{"traceId": "01", "spanId": "02", "name": "GET /"}]}]}]}'
    return [(p.name, p.read_bytes()) for p in files] + [
        ("latin1.jsonl", "\u00e9t\u00e9".encode("latin-1")), ("empty.json", b"{}"),
        ("broken.json", b'[{"messages": '), ("cut_trace.json", spans + b'\n{"name": '), ("no_llm.json", no_llm)]


def test_the_doctor_speaks_chinese_on_every_log_and_trace(fake_api):
    at = app(**api_state(fake_api), lang="zh")
    at.switch_page("app_pages/cache_doctor.py").run()
    found = []
    for name, data in doctor_inputs():
        at.file_uploader(key="doctor_files").upload(name, data, "application/json").run()
        found += [f"{name}: {finding}" for finding in english_on(at)]
    assert found == []


def test_refused_runs_are_said_in_chinese(fake_api):
    """A run over a hosted demo's limit, and experiment 6 (which needs a llama-server) on an API."""
    at = app(**api_state(fake_api), lang="zh")
    for name, value in {"PREFILL_LAB_HOSTED": "true", "PREFILL_LAB_ALLOWED_BASE_URLS": fake_api.base_url,
                        "PREFILL_LAB_ALLOW_LOOPBACK": "true", "PREFILL_LAB_MAX_TOKENS_PER_RUN": "10"}.items():
        at.secrets[name] = value
    at.run()
    at.switch_page("app_pages/cache.py").run()
    at.button(key="run_cache").click().run()
    assert [e.proto.icon for e in at.error] == [":material/block:"]
    found = english_on(at)
    at = app(**api_state(fake_api), lang="zh")
    at.run()
    at.switch_page("app_pages/kv_cache.py").run()
    at.button(key="run_kv_cache").click().run()
    assert at.error, "experiment 6 is refused on an API"
    assert found + english_on(at) == []
    assert fake_api.requests == []
