"""The capture proxy under bursts and faults, over real HTTP on 127.0.0.1: 50 agents at once, a body
nested 100k deep, a full disk (a small tmpfs mounted as root, and /dev/full), ``kill -9`` mid-write, a
log rotated or deleted under it. Every call is forwarded; the log stays one readable line per record."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest

from core import doctor
from core.capture.log import TOO_DEEP_NOTE, CaptureLog
from core.capture.proxy import CaptureServer
from tests.support import ROOT
from tests.support.fake_openai import FakeOpenAIServer

CHAT = "/v1/chat/completions"


def _chat(content: str = "hello", **extra: Any) -> dict[str, Any]:
    return {"model": "ok", "messages": [{"role": "user", "content": content}], "stream": True, **extra}


def _records(path: Path) -> tuple[list[dict[str, Any]], list[int]]:
    """The log's records, and the numbers of the lines that are not JSON."""
    records, bad = [], []
    for number, line in enumerate(path.read_text(encoding="utf-8").split("\n"), start=1):
        if not line.strip():
            continue
        try:
            records.append(json.loads(line))
        except ValueError:
            bad.append(number)
    return records, bad


@pytest.fixture()
def log(tmp_path: Path) -> Path:
    return tmp_path / "capture.jsonl"


@pytest.mark.slow
def test_fifty_agents_at_once_are_each_forwarded_and_logged_once(fake_api: FakeOpenAIServer, log: Path) -> None:
    agents = 50
    start = threading.Barrier(agents)
    statuses: dict[int, int | str] = {}

    with CaptureServer(fake_api.base_url, log) as proxy:
        def agent(number: int) -> None:
            start.wait()
            try:
                with httpx.Client(timeout=30) as client:  # a connection of its own, as separate agents have
                    statuses[number] = client.post(proxy.base_url + CHAT, json=_chat(f"agent {number}")).status_code
            except httpx.HTTPError as exc:
                statuses[number] = f"{type(exc).__name__}: {exc}"

        threads = [threading.Thread(target=agent, args=(n,)) for n in range(agents)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        assert proxy.in_flight.wait_idle(10)
    failed = {n: s for n, s in statuses.items() if s != 200}
    assert not failed and len(statuses) == agents, f"{len(failed)} of {agents} failed: {list(failed.values())[:3]}"
    forwarded = sorted(r["body"]["messages"][0]["content"] for r in fake_api.requests)
    records, bad = _records(log)
    logged = sorted(r["request"]["messages"][0]["content"] for r in records)
    assert forwarded == logged == sorted(f"agent {n}" for n in range(agents)) and not bad


class DeepUpstream(BaseHTTPRequestHandler):
    """Answers any POST with a small JSON completion; keeps the size of each body it received."""

    protocol_version = "HTTP/1.1"
    received: list[int] = []

    def log_message(self, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        self.received.append(len(self.rfile.read(int(self.headers["Content-Length"]))))
        data = json.dumps({"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 1}}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@pytest.fixture()
def deep_upstream() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), DeepUpstream)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_a_body_nested_100k_deep_is_forwarded_first_and_kept_as_text(deep_upstream: str, log: Path,
                                                                       tmp_path: Path) -> None:
    depth = 100_000
    body = ('{"model": "ok", "messages": [{"role": "user", "content": ' + "[" * depth + "]" * depth + "}]}").encode()
    with CaptureServer(deep_upstream, log) as proxy:
        response = httpx.post(proxy.base_url + CHAT, content=body, headers={"Content-Type": "application/json"},
                              timeout=30)
        assert proxy.in_flight.wait_idle(10)
    assert response.status_code == 200 and DeepUpstream.received[-1] == len(body)
    (record,), bad = _records(log)
    assert not bad and record["request_error"] == TOO_DEEP_NOTE and record["request"] == body.decode()
    assert record["response"]["usage"]["prompt_tokens"] == 3
    transcript = doctor.load_paths([log])  # the doctor names the line, it does not crash on it
    assert not transcript.rounds and "line 1" in transcript.errors[0] and "nested too deeply" in transcript.errors[0]


def test_a_line_cut_by_an_earlier_crash_is_not_glued_to_the_next_record(fake_api: FakeOpenAIServer,
                                                                       log: Path) -> None:
    whole = json.dumps({"request": _chat("first"), "response": {"status": 200}})
    log.write_text(whole + "\n" + whole[: len(whole) // 2])  # what a kill -9 in the middle of a write leaves
    with CaptureServer(fake_api.base_url, log) as proxy:
        assert httpx.post(proxy.base_url + CHAT, json=_chat("after the crash"), timeout=30).status_code == 200
        assert proxy.in_flight.wait_idle(10)
        assert proxy.log.count == 1
    records, bad = _records(log)
    assert bad == [2] and [r["request"]["messages"][0]["content"] for r in records] == ["first", "after the crash"]


@pytest.mark.slow
def test_kill_9_mid_write_then_a_restart_leaves_a_readable_log(fake_api: FakeOpenAIServer, log: Path) -> None:
    """Large records are written while the proxy is killed; a new proxy appends to the same log."""
    def start() -> tuple[subprocess.Popen[str], str]:
        process = subprocess.Popen([sys.executable, "-m", "core", "capture", "--upstream", fake_api.base_url,
                                    "--port", "0", "--out", str(log)], stdout=subprocess.PIPE,
                                   stderr=subprocess.DEVNULL, text=True, cwd=ROOT)
        assert process.stdout is not None
        for line in process.stdout:
            if "OpenAI-compatible base URL:" in line:
                return process, line.split("base URL:")[1].split()[0]
        raise AssertionError("the proxy exited before saying where it listens")

    process, base = start()
    big = "x" * 1_000_000

    def agent(number: int) -> None:
        try:
            httpx.post(base + "/chat/completions", json=_chat(f"{number} {big}"), timeout=30)
        except httpx.HTTPError:
            pass  # the proxy was killed under it

    threads = [threading.Thread(target=agent, args=(n,)) for n in range(12)]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + 60
    while log.stat().st_size == 0 and time.monotonic() < deadline:
        time.sleep(0.005)
    assert log.stat().st_size > 0, "no record was written within 60 s"
    os.kill(process.pid, signal.SIGKILL)  # the first record is in; the others are being forwarded or written
    process.wait(60)
    for thread in threads:
        thread.join(30)
    process, base = start()
    try:
        assert httpx.post(base + "/chat/completions", json=_chat("after kill -9"), timeout=30).status_code == 200
        process.send_signal(signal.SIGINT)
        process.wait(60)
    finally:
        process.kill()
    records, bad = _records(log)
    assert records[-1]["request"]["messages"][0]["content"] == "after kill -9"
    # a kill -9 inside the write may cut that one line (Linux ends a write early for a fatal signal); the
    # record after the restart still starts on a line of its own
    assert len(bad) <= 1 and len(records) + len(bad) >= 2, f"lines {bad} are not JSON: at most the one the kill cut"
    transcript = doctor.load_paths([log])
    assert len(transcript.errors) == len(bad) and transcript.rounds[-1].chat[-1]["content"] == "after kill -9"


def test_a_write_to_a_full_device_is_reported_and_not_counted(fake_api: FakeOpenAIServer,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    with CaptureServer(fake_api.base_url, Path("/dev/full"), echo=True) as proxy:
        assert httpx.post(proxy.base_url + CHAT, json=_chat(), timeout=30).status_code == 200
        assert proxy.in_flight.wait_idle(10)
        assert (proxy.log.count, proxy.log.failed) == (0, 1)
    err = capsys.readouterr().err
    assert "NOT logged: writing /dev/full failed (No space left on device) after 0 of" in err
    assert ", logged" not in err


@pytest.fixture()
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 64 KiB tmpfs (mounting needs root: `make test` runs as root in CI)."""
    mount = tmp_path / "disk"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mount)], capture_output=True)
    if done.returncode:
        pytest.skip(f"cannot mount a tmpfs here (needs root): {done.stderr.decode().strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", str(mount)], check=True)


def test_disk_full_mid_record_is_reported_and_the_next_record_starts_a_fresh_line(
        fake_api: FakeOpenAIServer, small_disk: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log, filler = small_disk / "capture.jsonl", small_disk / "filler"
    filler.write_bytes(b"f" * 24 * 1024)
    with CaptureServer(fake_api.base_url, log, echo=True) as proxy:
        def send(content: str) -> None:
            assert httpx.post(proxy.base_url + CHAT, json=_chat(content), timeout=30).status_code == 200
            assert proxy.in_flight.wait_idle(10)

        send("small one")
        send("big " + "y" * 60_000)  # more than the disk has left: part of it reaches the file
        filler.unlink()
        send("after space was freed")
        assert (proxy.log.count, proxy.log.failed) == (2, 1)
    err = capsys.readouterr().err
    assert "NOT logged: writing" in err and "(No space left on device) after " in err
    assert "the next record starts on a new line" in err
    records, bad = _records(log)
    assert [r["request"]["messages"][0]["content"] for r in records] == ["small one", "after space was freed"]
    assert bad == [2]
    transcript = doctor.load_paths([log])
    assert len(transcript.rounds) == 2 and len(transcript.errors) == 1 and "line 2" in transcript.errors[0]


def test_a_log_rotated_or_deleted_under_the_proxy_gets_a_new_file(fake_api: FakeOpenAIServer, log: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    with CaptureServer(fake_api.base_url, log, echo=True) as proxy:
        def send(content: str) -> None:
            assert httpx.post(proxy.base_url + CHAT, json=_chat(content), timeout=30).status_code == 200
            assert proxy.in_flight.wait_idle(10)

        send("before rotation")
        shutil.move(log, log.with_suffix(".1"))  # logrotate's default: move away, expect a new file
        send("after rotation")
        log.unlink()
        send("after deletion")
        assert proxy.log.count == 3
    assert [r["request"]["messages"][0]["content"] for r in _records(log.with_suffix(".1"))[0]] == ["before rotation"]
    assert [r["request"]["messages"][0]["content"] for r in _records(log)[0]] == ["after deletion"]
    assert capsys.readouterr().err.count("had been deleted or moved away, so a new one was started") == 2


def test_each_record_is_one_write_of_the_whole_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    writes: list[bytes] = []
    real_write = os.write
    monkeypatch.setattr(os, "write", lambda fd, data: writes.append(bytes(data)) or real_write(fd, data))
    capture = CaptureLog(tmp_path / "log.jsonl")
    assert capture.append({"request": {"messages": ["z" * 200_000]}}, []) == "logged"
    capture.close()
    assert len(writes) == 1 and writes[0].endswith(b"\n") and json.loads(writes[0])["request"]["messages"]
    assert capture.append({"request": {}}, []) == "not logged: the proxy had stopped"
