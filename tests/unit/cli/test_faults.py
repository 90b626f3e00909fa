"""Runs that stop, against the fault server on 127.0.0.1: a per-request deadline (``--deadline``) for a
stream that never ends or only pings, a stop at the asked number of tokens, non-numeric usage recorded
as unreadable, and Ctrl-C of the CLI keeping its exports (a real subprocess and a real SIGINT)."""

from __future__ import annotations

import csv
import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from core.backends import ChatRequest, OpenAICompatBackend
from core.records import RoundResult
from core.store import RunStore
from core.store.transfer import import_export, read_export
from tests.support import ROOT
from tests.support.fake_openai import FakeOpenAIServer

ASK = [{"role": "user", "content": "hi"}]


def _stream(server: FakeOpenAIServer, model: str, deadline_s: float, max_tokens: int = 32) -> tuple[float, str, str]:
    with OpenAICompatBackend(server.base_url, model, deadline_s=deadline_s) as backend:
        started = time.monotonic()
        result = backend.stream_chat(ChatRequest(ASK, max_tokens=max_tokens))
    assert not result.success
    return time.monotonic() - started, result.error, result.text


def test_an_endless_stream_stops_at_the_asked_number_of_tokens(fake_api: FakeOpenAIServer) -> None:
    seconds, error, text = _stream(fake_api, "endless", deadline_s=60, max_tokens=5)
    assert "more than the 5 tokens asked for (max_tokens)" in error
    assert text == " more" * 6 and seconds < 10  # the sixth chunk shows the ask was passed; reading stops there


@pytest.mark.slow
def test_a_stream_of_only_pings_is_ended_by_the_deadline() -> None:
    with FakeOpenAIServer(token_delay=0.05) as server:
        seconds, error, _ = _stream(server, "ping-only", deadline_s=1.0)
    assert "still open at its 1 s deadline (the server had sent only keep-alive comments" in error
    assert "--deadline" in error and 0.9 < seconds < 5


@pytest.mark.slow
def test_an_endless_stream_under_a_large_max_tokens_is_ended_by_the_deadline() -> None:
    with FakeOpenAIServer(token_delay=0.05) as server:
        seconds, error, text = _stream(server, "endless", deadline_s=1.0, max_tokens=100_000)
    assert "still open at its 1 s deadline (after" in error and text.startswith(" more")
    assert 0.9 < seconds < 5


@pytest.mark.slow
def test_a_silent_server_is_ended_by_the_deadline_not_the_read_timeout(fake_api: FakeOpenAIServer) -> None:
    seconds, error, _ = _stream(fake_api, "slow", deadline_s=1.0)  # "slow" sends its first byte after 3 s
    assert "still open at its 1 s deadline (nothing had arrived)" in error and seconds < 2.5


def _cli(server: FakeOpenAIServer, model: str, *argv: str) -> list[str]:
    return [sys.executable, "-m", "core", "--backend", "api", "--url", server.base_url, "--model", model, *argv]


@pytest.mark.slow
def test_non_numeric_usage_is_recorded_as_unreadable_never_a_crash(fake_api: FakeOpenAIServer, tmp_path: Path) -> None:
    out = tmp_path / "run.json"
    proc = subprocess.run(_cli(fake_api, "bad-usage", "--only", "output", "--lengths", "4", "--json", str(out)),
                          capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    (row,) = json.loads(out.read_text())["rounds"]
    assert row["output_tokens"] is None and row["prompt_tokens"] is None and row["cached_tokens"] is None
    for field in ("usage.prompt_tokens = 'many'", "usage.completion_tokens = [6]",
                  "usage.prompt_tokens_details.cached_tokens = -1"):
        assert field in row["unreadable_fields"]
    assert RoundResult(**row).unreadable_fields == row["unreadable_fields"]


@pytest.mark.slow
def test_the_cli_deadline_ends_a_pinging_stream_with_a_clear_message(tmp_path: Path) -> None:
    out = tmp_path / "run.json"
    with FakeOpenAIServer(token_delay=0.05) as server:
        proc = subprocess.run(_cli(server, "ping-only", "--only", "output", "--lengths", "4", "--deadline", "1",
                                   "--json", str(out)), capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert "1 s deadline (the server had sent only keep-alive comments" in proc.stdout
    data = json.loads(out.read_text())
    assert data["settings"]["deadline_s"] == 1.0 and "deadline" in data["rounds"][0]["error"]


@pytest.mark.slow
def test_ctrl_c_writes_what_was_measured_then_exits_130(tmp_path: Path) -> None:
    json_out, csv_out = tmp_path / "run.json", tmp_path / "run.csv"
    with FakeOpenAIServer(token_delay=0.3) as server:  # about 2 s a request: time to press Ctrl-C mid-run
        process = subprocess.Popen(_cli(server, "ok", "--only", "output", "--lengths", "6,6,6,6,6,6", "--json",
                                        str(json_out), "--csv", str(csv_out)),
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)
        try:
            assert process.stdout is not None
            rows = 0
            while rows < 2:
                line = process.stdout.readline()
                assert line, "the run ended before two rounds"
                rows += line.strip().startswith("output")
            process.send_signal(signal.SIGINT)
            out, err = process.communicate(timeout=60)
        finally:
            process.kill()
    assert process.returncode == 130, err
    assert "Traceback" not in err and "Interrupted (Ctrl-C): 2 records were measured" in err
    rounds = json.loads(json_out.read_text())["rounds"]
    assert len(rounds) == 2 and all(r["output_tokens"] == 6 and not r["error"] for r in rounds)
    assert len(list(csv.DictReader(csv_out.open()))) == 2
    assert "Decode ran at " in out  # the conclusion over what was measured


def test_two_experiments_in_one_export_keep_their_own_same_named_settings(fake_api: FakeOpenAIServer,
                                                                         tmp_path: Path) -> None:
    """Experiments 4 and 8 both have ``prompt_tokens`` (600 and 100 by default): the CLI's --json keeps each
    experiment's settings under its id, so neither overwrites the other, and an import gives each its own."""
    out = tmp_path / "run.json"
    proc = subprocess.run(_cli(fake_api, "ok", "--only", "batch", "--concurrency", "1", "--only", "arrivals",
                               "--rates", "2", "--duration-s", "0.5", "--no-save", "--json", str(out)),
                          capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    settings = json.loads(out.read_text())["settings"]
    assert (settings["batch"]["prompt_tokens"], settings["arrivals"]["prompt_tokens"]) == (600, 100)
    assert "prompt_tokens" not in settings and settings["only"] == ["batch", "arrivals"]
    imported = {item.experiment: item.settings for item in read_export(out.read_text(), "run.json")}
    assert imported["batch"]["prompt_tokens"] == 600 and imported["arrivals"]["prompt_tokens"] == 100
    assert imported["arrivals"]["model"] == "ok" and "batch" not in imported["arrivals"]
    store = RunStore.memory()
    stored = {run.experiment: run.settings for run in map(store.get, import_export(store, out.read_text(), "run.json"))
              if run is not None}
    assert (stored["batch"]["prompt_tokens"], stored["arrivals"]["prompt_tokens"]) == (600, 100)
