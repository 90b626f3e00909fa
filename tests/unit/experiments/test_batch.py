"""Experiment 4 (many requests at once): the real embedded server with slots, the fault server, the CLI."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from streamlit.testing.v1 import AppTest

from core.backends import OpenAICompatBackend
from core.backends.connect import Connection, Target, open_connection
from core.backends.tokens import EstimatingTokenCounter
from core.cli.main import main
from core.conclusions import NO_DATA, NOT_SHOWN, SHOWN, conclusion_of, paragraph
from core.engine.server import LocalServer
from core.experiments import EXPERIMENTS, batch
from core.experiments.base import RunContext
from core.experiments.batch import BatchLevel, levels_that_fit, server_slots, summarize_batch
from core.export import from_json, to_csv, to_json
from core.hosting import Refused, load_settings
from core.runs.runner import DONE, BackgroundRun
from core.stats import nearest_rank
from core.words import ContentWords
from tests.support.apptest import api_state, app
from tests.support.fake_openai import FakeOpenAIServer, Handler
from ui.runs.history import view_of


def _overlap_s(level: BatchLevel, phase: str) -> float:
    """How long every stream of ``phase`` was in flight at the same time."""
    streams = [s for s in level.streams if s.phase == phase]
    return min(s.end_s for s in streams) - max(s.start_s for s in streams)


def test_nearest_rank_percentiles_are_measured_values():
    values = [float(v) for v in range(10, 0, -1)]  # 10 .. 1, unsorted on purpose
    assert [nearest_rank(values, p) for p in (0, 10, 50, 90, 99, 100)] == [1, 1, 5, 9, 10, 10]
    assert nearest_rank([3.5], 99) == 3.5 and nearest_rank([], 50) is None


def test_levels_are_capped_by_slots_and_by_the_hosted_limit():
    assert levels_that_fit([8, 1, 2, 4, 2], 4) == [1, 2, 4]
    assert levels_that_fit([1, 16], None) == [1, 16]
    settings = load_settings({"PREFILL_LAB_HOSTED": "true"}.get)
    settings.check_concurrency(4)
    with pytest.raises(Refused, match="8 requests at once; this demo allows 4"):
        settings.check_concurrency(8)
    assert load_settings({}.get).max_concurrency is None


def test_verdict_needs_decode_to_grow_while_prefill_stays_flat():
    def curve(decode: list[float], prefill: list[float]) -> list[BatchLevel]:
        return [BatchLevel(n, aggregate_decode_tps=d, per_stream_decode_tps=d / n, aggregate_prefill_tps=p)
                for n, d, p in zip([1, 2, 4, 8][: len(decode)], decode, prefill, strict=True)]

    found = batch.conclude(curve([81, 104, 141, 177], [325, 299, 327, 294]), None)  # the CPU numbers
    assert found.status == SHOWN and found.decided_by is not None
    assert round(float(found.decided_by.values["gain"] or 0), 1) == 2.2 and found.decided_by.values["n2"] == 8
    flat = batch.conclude(curve([81, 80, 82, 79], [325, 299, 327, 294]), None)  # decode did not grow
    assert (flat.status, flat.decided_by.key if flat.decided_by else None) == (NOT_SHOWN, "decode_short")
    rising = batch.conclude(curve([81, 104, 141, 177], [300, 450, 600, 900]), None)  # prefill grew as much
    assert (rising.status, rising.decided_by.key if rising.decided_by else None) == (NOT_SHOWN, "prefill_not_flat")
    assert batch.conclude(curve([81], [325]), None).status == NO_DATA
    assert batch.plan(batch.Settings((1, 2, 4, 8))).requests == 31 and batch.plan(batch.Settings(())).requests == 0


# -- the real embedded llama-server with slots ------------------------------------------------------
@pytest.fixture(scope="module")
def slots_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalServer]:
    with LocalServer(context=4096, slots=2, log_dir=tmp_path_factory.mktemp("llama-slots")) as server:
        yield server


@pytest.mark.llama
def test_sweep_on_a_server_with_slots_overlaps_and_never_hits_the_cache(slots_server):
    with open_connection(Target("llama", url=slots_server.url)) as conn:
        assert server_slots(conn.backend) == 2
        settings = batch.Settings(tuple(levels_that_fit([1, 2, 4], 2)), output_tokens=32, prompt_tokens=300)
        levels = list(batch.rounds(RunContext(conn), settings))
    assert [lv.concurrency for lv in levels] == [1, 2]
    for level in levels:
        assert level.error == "" and level.errors == 0
        assert len(level.streams) == 2 * level.concurrency
        assert level.cached_tokens == 0, "every request starts with its own nonce and skips the cache"
        assert level.output_tokens == 32 * level.concurrency  # ignore_eos: exactly max_tokens each
        assert 250 * level.concurrency <= level.prefill_prompt_tokens <= 350 * level.concurrency
        assert level.aggregate_decode_tps and level.aggregate_prefill_tps and level.per_stream_decode_tps
        assert level.ttft_p50_ms <= level.ttft_p99_ms and level.itl_p50_ms <= level.itl_p99_ms
    pair = levels[1]
    decode = [s for s in pair.streams if s.phase == "decode"]
    assert all(s.start_s < 0.5 for s in decode), "both requests leave together"
    # the two answers really are decoded side by side: each started before the other ended, for most of their time
    assert _overlap_s(pair, "decode") > 0.5 * min(s.end_s - s.start_s for s in decode)


# -- the fault server ---------------------------------------------------------------------------------
class FailOneRequest(Handler):
    """Answers request number ``server.fail_at`` (counted from 1, in arrival order) with HTTP 500."""

    def do_POST(self) -> None:
        with self.server.count_lock:  # type: ignore[attr-defined]
            self.server.posts += 1  # type: ignore[attr-defined]
            failing = self.server.posts == self.server.fail_at  # type: ignore[attr-defined]
        if not failing:
            return super().do_POST()
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self._send_json(500, {"error": {"message": "This one stream failed."}})


@pytest.fixture()
def failing_api() -> Iterator[FakeOpenAIServer]:
    with FakeOpenAIServer(token_delay=0.05) as server:
        server.RequestHandlerClass = FailOneRequest
        server.count_lock, server.posts, server.fail_at = threading.Lock(), 0, 0  # type: ignore[attr-defined]
        yield server


def _api_sweep(server: FakeOpenAIServer, levels: list[int], output_tokens: int = 6, prompt_tokens: int = 100,
               **run: Any) -> list[BatchLevel]:
    with Connection("api", OpenAICompatBackend(server.base_url, "ok"), EstimatingTokenCounter()) as conn:
        return list(batch.rounds(RunContext(conn, **run), batch.Settings(tuple(levels), output_tokens, prompt_tokens)))


@pytest.mark.slow
def test_one_failing_stream_at_n4_is_recorded_and_nothing_else_is_lost(failing_api):
    # request 1 is the warm-up, 2-5 the prefill phase of N = 4, 6-9 its decode phase: the 7th fails
    failing_api.fail_at = 7  # type: ignore[attr-defined]
    four, two = _api_sweep(failing_api, [4, 2])
    assert four.errors == 1 and "HTTP 500" in four.error and "This one stream failed." in four.error
    decode = [s for s in four.streams if s.phase == "decode"]
    assert [bool(s.error) for s in decode].count(True) == 1
    assert four.output_tokens == 3 * 6, "the three other streams are kept"
    assert four.aggregate_decode_tps and four.per_stream_decode_tps and four.aggregate_prefill_tps
    ok = [s for s in decode if not s.error]  # the failed one ends at once; the others overlap
    assert min(s.end_s for s in ok) > max(s.start_s for s in ok)
    assert two.errors == 0 and two.error == "" and two.output_tokens == 2 * 6, "the next level still runs"


def test_a_level_where_every_request_fails_ends_the_sweep(fake_api):
    fake_api.fault = "401"
    levels = _api_sweep(fake_api, [1, 2], output_tokens=4, prompt_tokens=50)
    assert len(levels) == 1 and levels[0].errors == 2 and "HTTP 401" in levels[0].error


def test_stop_keeps_the_levels_already_measured(fake_api):
    cancel = threading.Event()

    def stop_at_second_level(progress: dict[str, Any]) -> None:
        if progress["level"] == 2:
            cancel.set()

    levels = _api_sweep(fake_api, [1, 2], cancel=cancel, progress=stop_at_second_level)
    assert [lv.concurrency for lv in levels] == [1]


def test_the_runner_and_the_exports_take_levels(fake_api):
    conn = Connection("api", OpenAICompatBackend(fake_api.base_url, "ok"), EstimatingTokenCounter())
    settings = batch.Settings((1, 2), output_tokens=6, prompt_tokens=100)
    run = BackgroundRun("batch", {"backend": "api", "model": "ok"}, lambda run: batch.rounds(run, settings),
                        connection=conn)
    run.start().join(60)
    conn.close()
    assert run.status == DONE and [lv.concurrency for lv in run.rows] == [1, 2]
    settings, back = from_json(to_json(run.settings, {"levels": run.rows}), "levels", BatchLevel)
    assert settings["model"] == "ok" and back == run.rows and back[1].streams[0].chunk_times_s
    header = to_csv(run.settings, run.rows).splitlines()[0].split(",")
    assert "aggregate_decode_tps" in header and "streams" not in header
    summary = summarize_batch(run.rows)
    assert summary is not None and summary.first.concurrency == 1 and summary.last.concurrency == 2


def test_cli_only_batch_writes_one_record_per_level(fake_api, tmp_path, capsys):
    out = tmp_path / "batch.json"
    code = main(["--backend", "api", "--url", fake_api.base_url, "--model", "ok", "--only", "batch",
                 "--concurrency", "1,2", "--json", str(out)])
    assert code == 0
    levels = json.loads(out.read_text())["levels"]
    assert [lv["concurrency"] for lv in levels] == [1, 2]
    for key in ("aggregate_decode_tps", "per_stream_decode_tps", "aggregate_prefill_tps", "ttft_p50_ms",
                "ttft_p99_ms", "itl_p50_ms", "error"):
        assert all(key in lv for lv in levels), key
    printed = capsys.readouterr().out
    assert "decode/s" in printed and "Decode throughput, all streams: " in printed


def test_the_summary_says_no_data_where_a_level_measured_none():
    levels = [BatchLevel(1, aggregate_decode_tps=90.0, per_stream_decode_tps=90.0),
              BatchLevel(2, aggregate_decode_tps=120.0, per_stream_decode_tps=60.0)]  # no prefill phase measured
    said = paragraph(batch.conclude(levels, None), ContentWords("en"))
    assert "Each stream: 90.0 → 60.0 tokens/s." in said and "Prefill" not in said


@pytest.mark.llama
def test_cli_experiment_4_alone_starts_one_embedded_server_with_its_slots(tmp_path):
    out = tmp_path / "batch.json"
    proc = subprocess.run([sys.executable, "-m", "core", "--only", "batch", "--concurrency", "1,2", "--context", "2048",
                           "--json", str(out)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.count("Starting the embedded llama-server") == 1 and "slots..." not in proc.stderr
    assert [level["concurrency"] for level in json.loads(out.read_text())["levels"]] == [1, 2]



def test_recorded_sample_holds_a_whole_default_sweep():
    settings, levels = EXPERIMENTS["batch"].recorded()
    assert settings["backend"] == "local" and settings["concurrency"] == [1, 2, 4, 8]
    assert [lv.concurrency for lv in levels] == [1, 2, 4, 8]
    assert all(lv.error == "" and lv.cached_tokens == 0 and len(lv.streams) == 2 * lv.concurrency for lv in levels)
    assert summarize_batch(levels) is not None


# -- the page, through AppTest ----------------------------------------------------------------------
PAGE = "app_pages/batch.py"


def _run_page(at: AppTest) -> AppTest:
    at.run()
    at.switch_page(PAGE).run()
    at.button(key="run_batch").click().run()
    return at


@pytest.mark.slow
def test_page_runs_the_sweep_and_names_a_failing_stream(failing_api):
    failing_api.fail_at = 5  # warm-up, N = 1 (2 requests), then N = 2's prefill phase: its second request fails
    at = _run_page(app(**api_state(failing_api), batch_concurrency=[1, 2]))
    assert not at.exception, at.exception
    assert list(at.dataframe[0].value["concurrency"]) == [1, 2]
    assert any("N = 2: 1 of 4 requests failed. First error: HTTP 500" in w.value for w in at.warning)
    assert any("Some requests failed: N = 2: HTTP 500" in e.value for e in at.error)


@pytest.mark.slow
def test_page_in_chinese_and_the_home_page_quotes_the_sweep(fake_api):
    at = _run_page(app(**api_state(fake_api), batch_concurrency=[1, 2], lang="zh"))
    assert not at.exception and at.title[0].value == "实验 4 · 多个请求同时进行"
    assert any("完成：2 档。" in s.value for s in at.success)
    assert any(m.value.startswith("**输出 ÷ 输入**\n- gpt-4.1: **4.0×**") for m in at.markdown)
    assert any("这次运行：单条流时" in m.value and "2 条流共用每一步时" in m.value for m in at.markdown), "price lens"
    view = view_of(at.session_state["history"]["batch"][-1])
    said = paragraph(conclusion_of(batch.EXPERIMENT, view.rows, view.state, view.conclusion), ContentWords("zh"))
    at.switch_page("app_pages/home.py").run()
    assert any(f"**实验 4 · 多个请求同时进行** · {said}" in m.value for m in at.markdown)  # the page's conclusion


@pytest.mark.slow
def test_hosted_visitor_cannot_choose_more_than_the_limit(fake_api):
    at = app(batch_concurrency=[1, 2, 4, 8], model="ok", backend="api", preset="vLLM", base_url=fake_api.base_url)
    for name, value in {"PREFILL_LAB_HOSTED": "true", "PREFILL_LAB_ALLOWED_BASE_URLS": fake_api.base_url,
                        "PREFILL_LAB_ALLOW_LOOPBACK": "true", "PREFILL_LAB_MAX_CONCURRENCY": "2",
                        "PREFILL_LAB_MAX_ROUNDS": "20"}.items():
        at.secrets[name] = value
    _run_page(at)
    assert not at.exception and not at.error, [e.value for e in at.error]
    assert at.multiselect(key="batch_concurrency").options == ["1", "2"]
    assert list(at.dataframe[0].value["concurrency"]) == [1, 2]
    assert len(fake_api.requests) == 1 + 2 * (1 + 2), "the warm-up, then two phases at N = 1 and N = 2 only"


@pytest.mark.slow
def test_page_shows_the_recorded_sweep_without_any_backend(fake_api):
    at = app(**api_state(fake_api))
    at.run()
    at.switch_page(PAGE).run()
    at.button(key="recorded_batch").click().run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    assert list(at.dataframe[0].value["concurrency"]) == [1, 2, 4, 8]
    assert fake_api.requests == [], "recorded results send nothing"
    assert any(s.value == "Done: 4 levels." for s in at.success)
