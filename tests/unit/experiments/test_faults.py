"""Faults from a real HTTP server on 127.0.0.1: each gives a clear error and loses nothing."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading

import httpx
import pytest

from core.backends import ChatRequest, OpenAICompatBackend
from core.backends.connect import Target, open_connection
from core.documents import fit_document
from core.experiments import output_length
from core.experiments import prefix_cache as cache
from core.experiments.base import RunContext
from tests.support.fake_openai import SLOW_SECONDS, WORDS

REQUEST = ChatRequest([{"role": "user", "content": "hello " * 40}], max_tokens=6)
KEY = "sk-fault-test-0123456789"


def _backend(fake_api, model: str, **kwargs) -> OpenAICompatBackend:
    return OpenAICompatBackend(fake_api.base_url, model, KEY, **kwargs)


@pytest.mark.parametrize("model,needle", [
    ("401", "API key was rejected"), ("404", "does not exist"), ("429", "retry after 7 s"), ("500", "server failed"),
    ("cut", "cut after 3 chunks"), ("garbage", "Malformed JSON"), ("no-stream", "cannot stream"),
])
def test_fault_gives_clear_error(fake_api, model, needle):
    with _backend(fake_api, model) as backend:
        result = backend.stream_chat(REQUEST)
    assert not result.success and needle in result.error
    if model in ("cut", "garbage"):
        assert result.text.startswith("Prefill reads"), "the chunks before the fault are kept"


@pytest.mark.parametrize("model", ["ok", "keepalive", "reasoning", "no-usage", "list-content"])
def test_quirks_that_are_not_faults(fake_api, model):
    with _backend(fake_api, model) as backend:
        result = backend.stream_chat(REQUEST)
    assert result.success, result.error
    assert result.text == "Prefill reads the prompt once."
    assert result.completion_tokens == (None if model == "no-usage" else 6)
    if model in ("reasoning", "list-content"):
        assert result.reasoning_text == "Let me think" and result.first_reasoning_s < result.ttft_s


def test_inline_think_stream_over_http(fake_api):
    """DeepSeek-R1 as Groq and Together serve it: TTFT is the answer's first word, not the <think>."""
    with _backend(fake_api, "think") as backend:
        result = backend.stream_chat(REQUEST)
    assert result.success, result.error
    assert result.reasoning_inline and result.reasoning_text == "\nLet me think\n"
    assert result.text == "\n\n" + "".join(WORDS)
    # five more think pieces, then the first word, each written after a token_delay sleep
    assert result.ttft_s - result.first_reasoning_s >= 5 * fake_api.token_delay


@pytest.mark.slow
def test_first_byte_later_than_timeout(fake_api):
    timeout = httpx.Timeout(connect=2, read=SLOW_SECONDS / 3, write=2, pool=2)
    with _backend(fake_api, "slow", timeout=timeout) as backend:
        result = backend.stream_chat(REQUEST)
    assert not result.success and "read timeout" in result.error


def test_server_down():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with OpenAICompatBackend(f"http://127.0.0.1:{port}/v1", "m", KEY) as backend:
        result = backend.stream_chat(REQUEST)
    assert not result.success and "Cannot connect" in result.error and "is the server running" in result.error


def test_key_never_in_error_even_when_server_echoes_it(fake_api):
    with _backend(fake_api, "echo-key") as backend:
        result = backend.stream_chat(REQUEST)
    assert "is not valid" in result.error and KEY not in result.error
    assert KEY not in json.dumps(backend.describe())


def test_failed_round_ends_the_experiment_and_keeps_earlier_rounds(fake_api):
    conn = open_connection(Target("api", fake_api.base_url, "ok", KEY))
    rows = []
    for row in output_length.rounds(RunContext(conn, warm=False), output_length.Settings(lengths=(3, 4))):
        rows.append(row)
        conn.backend.model = "500"  # the server starts failing after the first round
    assert [bool(r.error) for r in rows] == [False, True] and "HTTP 500" in rows[1].error


def test_api_cache_rounds_read_cached_tokens(fake_api):
    fake_api.cached_tokens = 64
    with open_connection(Target("api", fake_api.base_url, "ok")) as conn:
        document = fit_document("Some text. " * 200, 1000, conn.counter)
        rows = list(cache.rounds(RunContext(conn, warm=False), cache.Settings(rounds=2, fitted=document)))
    assert all(r.cached_tokens == 64 and r.recomputed_tokens == r.prompt_tokens - 64 for r in rows)
    bodies = [r["body"] for r in fake_api.requests]
    assert bodies[1]["messages"][0] == bodies[0]["messages"][0], "append only keeps the system prompt"


@pytest.mark.slow
def test_no_thread_leak_after_many_faults(fake_api):
    before = threading.active_count()
    for model in ["401", "cut", "garbage", "500"] * 3:
        with _backend(fake_api, model) as backend:
            backend.stream_chat(REQUEST)
    assert threading.active_count() <= before + 2  # the fake server's handler threads wind down


@pytest.mark.slow
def test_cli_against_fake_api_keeps_rounds_and_hides_key(fake_api, tmp_path):
    out = tmp_path / "run.json"
    env = {**os.environ, "MY_KEY": KEY}
    proc = subprocess.run([sys.executable, "-m", "core", "--backend", "api", "--url", fake_api.base_url,
                           "--model", "cut",
                           "--key-env", "MY_KEY", "--only", "output", "--lengths", "2,8", "--json", str(out)],
                          capture_output=True, text=True, timeout=60, env=env)
    assert proc.returncode == 1
    data = out.read_text()
    rounds = json.loads(data)["rounds"]
    assert rounds[0]["error"] == "" and "cut after 3 chunks" in rounds[1]["error"]
    assert KEY not in data and KEY not in proc.stdout and KEY not in proc.stderr
    assert json.loads(data)["settings"]["api_key_set"] is True


@pytest.mark.slow
@pytest.mark.parametrize("fault,needle", [
    ("401", "API key was rejected"), ("404", "does not exist"), ("429", "retry after 7 s"), ("500", "server failed"),
    ("cut", "cut after"), ("garbage", "Malformed JSON"), ("no-stream", "cannot stream"),
])
def test_cli_fault_matrix_keeps_the_good_round(fake_api, tmp_path, fault, needle):
    fake_api.fault, fake_api.fault_after = fault, 2  # the warm-up and round 1 succeed
    out = tmp_path / "run.json"
    proc = subprocess.run([sys.executable, "-m", "core", "--backend", "api", "--url", fake_api.base_url,
                           "--model", "ok",
                           "--only", "output", "--lengths", "2,4,6", "--json", str(out)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1
    rounds = json.loads(out.read_text())["rounds"]
    assert len(rounds) == 2 and rounds[0]["error"] == "" and needle in rounds[1]["error"]
    assert needle in proc.stdout


def test_cli_refuses_rounds_that_do_not_fit_the_context(local_server):
    proc = subprocess.run([sys.executable, "-m", "core", "--backend", "llama", "--url", local_server.url,
                           "--only", "cache",
                           "--rounds", "200"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "200 rounds do not fit in a 4,096-token context" in proc.stderr


def test_llama_server_that_is_down_gets_a_readable_message():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    message = f"Cannot reach a llama-server at http://127.0.0.1:{port}: is it running"
    with pytest.raises(httpx.ConnectError, match=message):
        open_connection(Target("llama", f"http://127.0.0.1:{port}/v1"))
