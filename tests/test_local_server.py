"""The three experiments against the real embedded llama-server and the real SmolLM2 model."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from core import experiments as ex
from core.connect import Target, open_connection
from core.engine import EngineError, LocalServer, find_model, find_server_binary
from core.prompts import ServerTokenCounter, default_document, fit_document

pytestmark = pytest.mark.llama

SMALL_DOC_TOKENS = 600


def test_engine_finds_the_embedded_binary_and_verified_model():
    assert find_server_binary().name == "llama-server"
    assert find_model().name == "SmolLM2-135M-Instruct.Q4_1.gguf"


def test_environment_overrides_and_their_errors(monkeypatch, tmp_path):
    binary = find_server_binary()
    monkeypatch.setenv("LLAMA_SERVER_BIN", str(binary))
    monkeypatch.setenv("LLAMA_MODEL", str(find_model()))
    assert find_server_binary() == binary and find_model().name.endswith(".gguf")
    monkeypatch.setenv("LLAMA_MODEL", str(tmp_path / "missing.gguf"))
    with pytest.raises(EngineError, match="LLAMA_MODEL points to .*missing.gguf, which does not exist"):
        find_model()


def test_a_model_that_fails_to_load_reports_the_log_tail(monkeypatch, tmp_path):
    bad = tmp_path / "broken.gguf"
    bad.write_bytes(b"GGUF but not really a model")
    with pytest.raises(EngineError, match="exited with code") as caught:
        LocalServer(model=bad, log_dir=tmp_path, startup_timeout=60).start()
    assert "broken.gguf" in str(caught.value)


def test_props_and_exact_token_counts(local):
    assert local.context == 4096 and local.info["model"].endswith(".gguf") and local.info["server_build"]
    counter = ServerTokenCounter(local.backend)
    fitted = fit_document(default_document()[:20000], 300, counter)
    assert fitted.truncated and 295 <= counter.count(fitted.text) <= 305


def test_prefix_cache_append_reuses_timestamp_recomputes(local):
    document = fit_document(default_document(), SMALL_DOC_TOKENS, local.counter)
    rows = list(ex.prefix_cache_rounds(local.backend, document, ["append_only", "timestamp_first"], rounds=3,
                                       answer_tokens=12))
    assert [r.error for r in rows] == [""] * 6
    append = [r for r in rows if r.strategy == "append_only"]
    stamp = [r for r in rows if r.strategy == "timestamp_first"]
    assert append[0].recomputed_tokens > SMALL_DOC_TOKENS
    for row in append[1:]:
        assert row.recomputed_tokens <= 32 and row.reused_tokens > SMALL_DOC_TOKENS
    for row in stamp:
        assert row.recomputed_tokens >= 0.9 * row.prompt_tokens
    summary = ex.summarize_cache(rows)
    assert ex.recomputed_ratio(summary)["timestamp_first"] > 2


def test_ttft_grows_with_input_length(local):
    rows = list(ex.input_length_sweep(local.backend, default_document(), local.counter, sizes=[128, 1024], max_tokens=2))
    assert [r.error for r in rows] == ["", ""]
    short, long = rows
    assert long.prompt_tokens > 5 * short.prompt_tokens
    assert long.ttft_ms > short.ttft_ms and long.prefill_ms > short.prefill_ms
    assert short.recomputed_tokens >= short.prompt_tokens - 4, "the nonce at the start defeats the cache"
    assert ex.summarize_input(rows).prefill_tokens_per_s > 50


def test_total_time_grows_with_output_length(local):
    rows = list(ex.output_length_sweep(local.backend, lengths=[8, 64]))
    assert [r.output_tokens for r in rows] == [8, 64]  # ignore_eos forces the exact length
    assert rows[1].total_ms > rows[0].total_ms
    summary = ex.summarize_output(rows)
    assert 1 < summary.ms_per_token < 500


def test_stop_keeps_measured_rounds(local):
    import threading

    cancel = threading.Event()
    rows = []
    for row in ex.output_length_sweep(local.backend, lengths=[4, 4, 4, 4], cancel=cancel, warm=False):
        rows.append(row)
        if len(rows) == 2:
            cancel.set()
    assert len(rows) == 2 and all(not r.error for r in rows)


def test_cli_cache_experiment_on_embedded_default(tmp_path):
    out = tmp_path / "cache.json"
    proc = subprocess.run([sys.executable, "-m", "core", "--only", "cache", "--rounds", "2", "--doc-tokens", "300",
                           "--context", "2048", "--json", str(out), "--csv", str(tmp_path / "cache.csv")],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "append_only" in proc.stdout and "timestamp_first recomputed" in proc.stdout
    import json

    data = json.loads(out.read_text())
    assert data["settings"]["backend"] == "llama" and len(data["rounds"]) == 4
    first = data["rounds"][0]
    for key in ("experiment", "strategy", "round", "prompt_tokens", "recomputed_tokens", "reused_tokens", "prefill_ms",
                "ttft_ms", "output_tokens", "decode_ms", "error"):
        assert key in first
    assert "prefix_cache" in (tmp_path / "cache.csv").read_text()


def test_crash_is_detected_with_log_tail(tmp_path):
    server = LocalServer(context=1024, log_dir=tmp_path).start()
    try:
        os.killpg(server.process.pid, signal.SIGKILL)
        server.process.wait(5)
        message = server.crashed()
        assert message and "exit code" in message and "llama" in message.lower()
        conn_error = None
        try:
            open_connection(Target("llama", server.url))
        except Exception as exc:  # noqa: BLE001 - any connection failure is the expected outcome here
            conn_error = exc
        assert conn_error is not None
    finally:
        server.stop()


def test_server_dies_with_a_killed_parent(tmp_path):
    script = textwrap.dedent(f"""
        import sys, time
        sys.path.insert(0, {str(os.getcwd())!r})
        from core.engine import LocalServer
        s = LocalServer(context=1024, log_dir={str(tmp_path)!r}).start()
        print(s.process.pid, flush=True)
        time.sleep(60)
    """)
    parent = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    child_pid = int(parent.stdout.readline())
    parent.kill()
    parent.wait()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and _alive(child_pid):
        time.sleep(0.1)
    assert not _alive(child_pid), "llama-server was orphaned"


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().split()[2] != "Z"
    except FileNotFoundError:
        return False
