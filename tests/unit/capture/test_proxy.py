"""The capture proxy over real HTTP on 127.0.0.1: the embedded llama-server, the fault server, and a
recorded Anthropic stream served by a small real server; then the doctor on what was captured."""

from __future__ import annotations

import argparse
import json
import signal
import socket
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
from core.capture.log import ResponseWatcher
from core.capture.proxy import CaptureServer
from core.cli import capture as capture_cli
from tests.support import ROOT
from tests.support.fake_openai import FakeOpenAIServer

KEY = "sk-capture-test-7f3a9c2e5b8d1f4a"
CHAT = "/v1/chat/completions"
ANTHROPIC_STREAM = [  # the documented Messages stream: usage in message_start, final output_tokens in message_delta
    b'event: message_start\ndata: {"type":"message_start","message":{"id":"msg_01","type":"message","role":"assistant",'
    b'"content":[],"model":"claude-sonnet-4-5","usage":{"input_tokens":12,"cache_creation_input_tokens":0,'
    b'"cache_read_input_tokens":2048,"output_tokens":1}}}\n\n',
    b'event: content_block_start\ndata: {"type":"content_block_start","index":0,'
    b'"content_block":{"type":"text","text":""}}\n\n',
    b'event: ping\ndata: {"type": "ping"}\n\n',
    b'event: content_block_delta\ndata: {"type":"content_block_delta","index":0,'
    b'"delta":{"type":"text_delta","text":"Hi"}}\n\n',
    b'event: content_block_stop\ndata: {"type":"content_block_stop","index":0}\n\n',
    b'event: message_delta\ndata: {"type":"message_delta","delta":{"stop_reason":"end_turn"},'
    b'"usage":{"output_tokens":15}}\n\n',
    b'event: message_stop\ndata: {"type":"message_stop"}\n\n',
]


def _chat(model: str = "ok", content: str = "hello", **extra: Any) -> dict[str, Any]:
    return {"model": model, "messages": [{"role": "user", "content": content}], "stream": True, **extra}


def _lines(path: Path, proxy: CaptureServer | None = None) -> list[dict[str, Any]]:
    """The log's lines; with a running ``proxy``, once the calls it is still logging are done."""
    assert proxy is None or proxy.in_flight.wait_idle(10)
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.fixture()
def log(tmp_path: Path) -> Path:
    return tmp_path / "capture.jsonl"


@pytest.fixture()
def proxied(fake_api: FakeOpenAIServer, log: Path) -> Iterator[CaptureServer]:
    with CaptureServer(fake_api.base_url, log, echo=True) as proxy:
        yield proxy


class AnthropicUpstream(BaseHTTPRequestHandler):
    """Serves the recorded Messages stream, one event per HTTP chunk; keeps each request's headers."""

    protocol_version = "HTTP/1.1"
    seen: list[dict[str, str]] = []

    def log_message(self, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["Content-Length"]))
        self.seen.append({name.lower(): value for name, value in self.headers.items()})
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        for event in ANTHROPIC_STREAM:
            self.wfile.write(b"%x\r\n%s\r\n" % (len(event), event))
            self.wfile.flush()
        self.wfile.write(b"0\r\n\r\n")


@pytest.mark.llama
def test_llama_stream_reaches_the_agent_as_direct_and_is_logged(local_server, log):
    body = {"messages": [{"role": "system", "content": "You are terse."},
                         {"role": "user", "content": "Name three colours."}],
            "stream": True, "max_tokens": 12, "temperature": 0, "seed": 1, "cache_prompt": False,
            "stream_options": {"include_usage": True}}

    def events(base: str) -> list[dict[str, Any]]:  # each chunk, less what differs per request
        response = httpx.post(base + CHAT, json=body, timeout=60)
        assert response.status_code == 200
        chunks = [json.loads(line[6:]) for line in response.text.splitlines() if line.startswith("data: {")]
        return [{k: v for k, v in chunk.items() if k not in ("id", "created", "timings")} for chunk in chunks]

    with CaptureServer(local_server.url, log) as proxy:
        direct, through = events(local_server.url), events(proxy.base_url)
    assert through == direct and len(through) > 3
    (line,) = _lines(log)
    assert line["request"] == body and line["endpoint"] == CHAT
    response = line["response"]
    assert response["status"] == 200 and "error" not in response
    assert response["usage"]["prompt_tokens"] == response["timings"]["prompt_n"] > 10
    assert response["usage"] == next(chunk["usage"] for chunk in through if chunk.get("usage"))
    assert 0 < response["ttft_ms"] <= response["total_ms"]


@pytest.mark.slow
def test_stream_passes_unchanged_and_unbuffered(log):
    with FakeOpenAIServer(token_delay=0.25) as fake, CaptureServer(fake.base_url, log) as proxy:
        direct = httpx.post(fake.base_url + "/chat/completions", json=_chat(), timeout=30).content
        arrivals, received = [], b""
        with httpx.stream("POST", proxy.base_url + CHAT, json=_chat(), timeout=30) as response:
            for data in response.iter_raw():
                received += data
                if b'"content": "' in data:
                    arrivals.append(time.perf_counter())
    assert received == direct
    assert len(arrivals) == 6 and arrivals[-1] - arrivals[0] > 0.6, "tokens reached the agent as they came (5 x 0.25 s)"
    (line,) = _lines(log)
    assert line["response"]["usage"]["completion_tokens"] == 6
    assert line["response"]["ttft_ms"] < line["response"]["total_ms"] - 600


def test_upstream_500_reaches_the_agent_and_the_log(proxied, fake_api, log):
    direct = httpx.post(fake_api.base_url + "/chat/completions", json=_chat("500"))
    response = httpx.post(proxied.base_url + CHAT, json=_chat("500"))
    assert (response.status_code, response.content) == (direct.status_code, direct.content) == (500, direct.content)
    (line,) = _lines(log, proxied)
    assert line["response"]["status"] == 500 and line["response"]["usage"] is None
    assert line["response"]["error"] == "upstream answered 500: Internal error."


def test_cut_stream_is_cut_for_the_agent_and_logged(proxied, log):
    received = b""
    with pytest.raises(httpx.RemoteProtocolError):
        with httpx.stream("POST", proxied.base_url + CHAT, json=_chat("cut")) as response:
            for data in response.iter_raw():
                received += data
    assert received.count(b'"content": "') == 3, "the chunks before the cut arrived"
    (line,) = _lines(log, proxied)
    assert line["response"]["status"] == 200 and line["response"]["error"].startswith("upstream stream cut")
    assert line["response"]["usage"] is None


def test_keys_are_forwarded_but_never_logged(proxied, fake_api, log, tmp_path, capsys):
    response = httpx.post(proxied.base_url + CHAT + f"?api_key={KEY}", json=_chat("echo-key"),
                          headers={"Authorization": f"Bearer {KEY}", "x-api-key": KEY})
    assert KEY in response.text, "the upstream's answer reaches the agent unchanged"
    assert fake_api.requests[-1]["authorization"] == f"Bearer {KEY}"
    AnthropicUpstream.seen = []
    with ThreadingHTTPServer(("127.0.0.1", 0), AnthropicUpstream) as upstream:
        threading.Thread(target=upstream.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        with CaptureServer(f"http://127.0.0.1:{upstream.server_port}", tmp_path / "anthropic.jsonl") as proxy:
            httpx.post(proxy.base_url + "/v1/messages", json={"model": "claude", "messages": []},
                       headers={"x-api-key": KEY})
        upstream.shutdown()
    assert AnthropicUpstream.seen[0]["x-api-key"] == KEY
    _lines(log, proxied)
    printed = capsys.readouterr().err
    assert "-> 401" in printed and "upstream answered 401: Key *** is not valid." in printed and KEY[-8:] not in printed
    for path in (log, tmp_path / "anthropic.jsonl"):
        text = path.read_text()
        assert text.count("\n") == 1 and KEY[:8] not in text and KEY[-8:] not in text
        assert "authorization" not in text.lower() and "x-api-key" not in text


def test_anthropic_stream_usage_is_merged(log):
    body = {"model": "claude-sonnet-4-5", "max_tokens": 64, "stream": True,
            "system": [{"type": "text", "text": "You are terse.", "cache_control": {"type": "ephemeral"}}],
            "messages": [{"role": "user", "content": [{"type": "text", "text": "Hi"}]}]}
    with ThreadingHTTPServer(("127.0.0.1", 0), AnthropicUpstream) as upstream:
        threading.Thread(target=upstream.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        with CaptureServer(f"http://127.0.0.1:{upstream.server_port}", log) as proxy:
            response = httpx.post(proxy.base_url + "/v1/messages", json=body)
        upstream.shutdown()
    assert response.content == b"".join(ANTHROPIC_STREAM)
    (line,) = _lines(log)
    assert line["endpoint"] == "/v1/messages" and line["request"] == body
    assert line["response"]["usage"] == {"input_tokens": 12, "cache_creation_input_tokens": 0,
                                         "cache_read_input_tokens": 2048, "output_tokens": 15}


def test_responses_stream_read_across_split_chunks():
    stream = (b'event: response.created\ndata: {"type":"response.created","response":{"id":"r1","usage":null}}\n\n'
              b'event: response.output_text.delta\ndata: {"type":"response.output_text.delta","delta":"Hi"}\n\n'
              b'event: response.completed\ndata: {"type":"response.completed","response":{"id":"r1","usage":'
              b'{"input_tokens":2006,"input_tokens_details":{"cached_tokens":1920},"output_tokens":3}}}\n\n')
    watcher = ResponseWatcher(time.perf_counter())
    watcher.streaming = True
    for index in range(len(stream)):  # one byte at a time: lines are split anywhere
        watcher.feed(stream[index:index + 1])
    result = watcher.result(200)
    assert result["usage"] == {"input_tokens": 2006, "input_tokens_details": {"cached_tokens": 1920},
                               "output_tokens": 3}
    assert result["ttft_ms"] is not None and "error" not in result


def test_upstream_down_gives_502_with_a_readable_body(log):
    with CaptureServer("http://127.0.0.1:9", log) as proxy:
        response = httpx.post(proxy.base_url + CHAT, json=_chat())
    assert response.status_code == 502
    assert "no answer from http://127.0.0.1:9" in response.json()["error"]["message"]
    (line,) = _lines(log)
    assert line["response"]["status"] == 502 and "no answer" in line["response"]["error"]


def test_other_paths_pass_through_unlogged(proxied, log):
    assert httpx.get(proxied.base_url + "/v1/models").json() == {"data": [{"id": "ok"}]}
    assert httpx.post(proxied.base_url + "/v1/embeddings", json={"model": "ok", "input": "x"}).status_code == 200
    assert httpx.post(proxied.base_url + CHAT, content=b"").status_code == 200, "a body that is not JSON is passed on"
    assert _lines(log, proxied) == []


@pytest.mark.slow
def test_concurrent_requests_give_whole_lines(proxied, log):
    def send(worker: int) -> None:
        for turn in range(3):  # many small parts: a line written piece by piece would interleave
            body = _chat("no-stream", f"{worker}-{turn}")
            body["messages"] += [{"role": "user", "content": f"part {index}"} for index in range(4000)]
            assert httpx.post(proxied.base_url + CHAT, json=body, timeout=30).status_code == 200

    threads = [threading.Thread(target=send, args=(worker,)) for worker in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    lines = _lines(log, proxied)
    sent = {line["request"]["messages"][0]["content"].split()[0] for line in lines}
    assert len(lines) == 24 and sent == {f"{w}-{t}" for w in range(8) for t in range(3)}


def test_doctor_finds_the_break_sent_through_the_proxy(proxied, log, tmp_path):
    system = "You are a careful coding agent. Use the tools to read files before you edit them."
    history = [{"role": "user", "content": "List the files in src/."},
               {"role": "assistant", "content": "src/main.py and src/util.py."},
               {"role": "user", "content": "Open src/util.py."},
               {"role": "assistant", "content": "It defines slugify()."},
               {"role": "user", "content": "Add a docstring to slugify."}]
    rounds = [[{"role": "system", "content": system}] + history[:1],
              [{"role": "system", "content": system}] + history[:3],
              [{"role": "system", "content": "2026-11-30T05:12:09Z " + system}] + history]
    for messages in rounds:
        body = {"model": "ok", "messages": messages, "stream": True}
        assert httpx.post(proxied.base_url + CHAT, json=body).status_code == 200
    # the doctor on main reads plain bodies; once it reads {"request": ...} lines, give it the log itself
    bodies = "".join(json.dumps(line["request"]) + "\n" for line in _lines(log, proxied))
    analysis = doctor.analyse(doctor.load_inputs([("captured.jsonl", bodies.encode())]))
    assert [f.breaks_cache for f in analysis.findings] == [False, False, True]
    found = analysis.findings[2]
    assert (found.message_index, found.field) == (0, "content")
    assert "2026-11-30T05:12:09Z" in found.new_snippet
    assert found.cause in (doctor.TIMESTAMP, doctor.SYSTEM_PROMPT_CHANGED)  # main's doctor says the latter


@pytest.mark.slow
def test_cli_says_where_to_point_the_agent_and_ctrl_c_lets_a_call_in_flight_finish(log):
    script = ("import argparse, sys; from core.cli import capture as c; p = argparse.ArgumentParser(); "
              "c.add_arguments(p); sys.exit(c.run(p.parse_args(sys.argv[1:])))")
    with FakeOpenAIServer(token_delay=0.2) as fake:
        process = subprocess.Popen([sys.executable, "-c", script, "--upstream", fake.base_url, "--port", "0",
                                    "--out", str(log)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                   cwd=ROOT)
        try:
            base = ""
            assert process.stdout is not None
            while not base:
                line = process.stdout.readline()
                assert line, "the proxy exited before saying where it listens"
                if "OpenAI-compatible base URL:" in line:
                    base = line.split("base URL:")[1].split()[0]
            received = b""
            with httpx.stream("POST", base + "/chat/completions", json=_chat(), timeout=30) as response:
                for data in response.iter_raw():
                    if not received:
                        process.send_signal(signal.SIGINT)  # stop while the answer is still streaming
                    received += data
            out, err = process.communicate(timeout=120)
        finally:
            process.kill()
    assert received.endswith(b"data: [DONE]\n\n") and received.count(b'"content": "') == 6
    assert process.returncode == 0, err
    assert "calls logged: 1" in out and "Traceback" not in err
    assert len(_lines(log)) == 1


def test_bad_arguments_get_a_clear_message(tmp_path, capsys):
    with pytest.raises(ValueError, match="must be an http:// or https:// URL, got 'api.openai.com'"):
        CaptureServer("api.openai.com", tmp_path / "log.jsonl")
    parser = argparse.ArgumentParser()
    capture_cli.add_arguments(parser)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = str(taken.getsockname()[1])
        cases = [(["--out", str(tmp_path / "missing" / "log.jsonl")], "cannot open the log"),
                 (["--out", str(tmp_path / "log.jsonl"), "--port", port], f"cannot listen on 127.0.0.1:{port}")]
        for argv, needle in cases:
            assert capture_cli.run(parser.parse_args(["--upstream", "http://127.0.0.1:9", *argv])) == 2
            assert needle in capsys.readouterr().err
