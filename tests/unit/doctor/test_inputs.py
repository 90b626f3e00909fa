"""The cache doctor's input under hostile files: each bad line named by file and line, never a traceback;
a gate that fails on what it could not read; one bounded read of each file (``/dev/zero``, a FIFO,
``<(zcat log.gz)``), gzip and UTF-16 read as such."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from core import doctor
from core.cli.main import main
from tests.support import ROOT

TIMESTAMP = ROOT / "tests" / "data" / "doctor" / "timestamp.jsonl"  # 4 rounds; round 3 breaks the cache (timestamp)
LINES = TIMESTAMP.read_text().splitlines()
BODY = json.loads(LINES[0])
RSS_BOUND_KB = 400_000  # the doctor's own memory while refusing an endless input: 50 MB read plus Python
# The child's own peak (VmHWM starts afresh at exec; getrusage's ru_maxrss keeps the forking pytest's peak).
MEASURED = ("import re, sys; from core.cli.main import main; rc = main(sys.argv[1:]); "
            "hwm = re.search(r'VmHWM:\\s+(\\d+)', open('/proc/self/status').read()).group(1); "
            "print('maxrss_kb', hwm, file=sys.stderr); sys.exit(rc)")


def _wrapped(usage: Any) -> str:
    return json.dumps({"request": BODY, "response": {"status": 200, "usage": usage}})


def _doctor(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["doctor", *argv])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("line,needle", [
    ("[" * 100_000 + "]" * 100_000, "line 2: nested too deeply to read"),
    ('{"request": {"messages": [{"role": "user", "content": ' + "[" * 100_000 + "]" * 100_000 + "}]}}",
     "line 2: nested too deeply to read"),
    (_wrapped({"prompt_tokens": 1e999999, "prompt_tokens_details": {"cached_tokens": 3}}).replace(
        "Infinity", "1e999999"), "line 2: response.usage.prompt_tokens = inf (not a token count)"),
    (_wrapped({"prompt_tokens": 100, "prompt_tokens_details": {"cached_tokens": [1, 2]}}),
     "line 2: response.usage.prompt_tokens_details.cached_tokens = [1, 2] (not a token count)"),
    (_wrapped({"prompt_tokens": "many", "prompt_tokens_details": {"cached_tokens": 3}}),
     "line 2: response.usage.prompt_tokens = 'many' (not a token count)"),
    (_wrapped({"prompt_tokens": -5, "prompt_tokens_details": {"cached_tokens": 0}}),
     "line 2: response.usage.prompt_tokens = -5 (not a token count)"),
    (_wrapped({"input_tokens": True, "cache_read_input_tokens": 10}),
     "line 2: response.usage.input_tokens = True (not a token count)"),
    (_wrapped({"prompt_tokens": 100, "prompt_tokens_details": {"cached_tokens": 900}}),
     "line 2: usage not used: 900 cached tokens is more than the 100 prompt tokens"),
    (_wrapped({"prompt_tokens": 100, "prompt_cache_hit_tokens": "all"}),
     "line 2: response.usage.prompt_cache_hit_tokens = 'all' (not a token count)"),
])
def test_each_bad_line_is_one_named_line_never_a_traceback(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                           line: str, needle: str) -> None:
    log = tmp_path / "agent.jsonl"
    log.write_text("\n".join([LINES[0], line, LINES[1], LINES[2]]) + "\n")
    code, out, err = _doctor(capsys, str(log))
    assert code == 0 and "Traceback" not in err
    said = "not used" if "token" in needle else "not read"  # a count left out of a round that was read
    assert f"{said}: agent.jsonl {needle}" in err, err
    assert "The cache first breaks in round" in out  # the rest was analysed


def test_a_cut_breaking_round_fails_the_gate_unless_allowed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A killed agent leaves its last line cut: here that is the round that breaks the cache."""
    log = tmp_path / "agent.jsonl"
    log.write_text(LINES[0] + "\n" + LINES[1] + "\n" + LINES[2][: len(LINES[2]) // 2])
    code, out, _ = _doctor(capsys, str(log), "--fail-on-break")
    assert code == 1
    assert "FAIL: 1 line(s) could not be read and were not checked" in out and "agent.jsonl line 3" in out
    code, out, _ = _doctor(capsys, str(log), "--fail-on-break", "--allow-unread")
    assert code == 0 and "FAIL" not in out
    code, out, _ = _doctor(capsys, str(TIMESTAMP), "--fail-on-break", "--allow-unread")
    assert code == 1 and "round(s) break the prompt cache" in out  # the flag accepts unread lines, not breaks


def _measured(*argv: str, timeout: float = 60) -> tuple[subprocess.CompletedProcess[str], float, int]:
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-c", MEASURED, "doctor", *argv], capture_output=True, text=True,
                          timeout=timeout, cwd=ROOT)
    rss = int(proc.stderr.split("maxrss_kb")[1].split()[0])
    return proc, time.monotonic() - started, rss


@pytest.mark.slow
def test_dev_zero_is_refused_at_the_size_cap_in_bounded_time_and_memory() -> None:
    proc, seconds, rss = _measured("/dev/zero")
    assert proc.returncode == 2 and "/dev/zero is larger than 50 MB (reading stopped there)" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert seconds < 30 and rss < RSS_BOUND_KB, (seconds, rss)


@pytest.mark.slow
def test_a_fifo_is_read_once(tmp_path: Path) -> None:
    fifo = tmp_path / "log.fifo"
    os.mkfifo(fifo)

    def write() -> None:
        with fifo.open("w") as handle:
            handle.write(TIMESTAMP.read_text())

    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    proc, seconds, rss = _measured(str(fifo))
    writer.join(60)
    assert proc.returncode == 0, proc.stderr
    assert "4 rounds read" in proc.stdout and "first breaks in round 3" in proc.stdout
    assert seconds < 30 and rss < RSS_BOUND_KB, (seconds, rss)


@pytest.mark.slow
def test_process_substitution_of_a_gzip_log(tmp_path: Path) -> None:
    packed = tmp_path / "agent.jsonl.gz"
    packed.write_bytes(gzip.compress(TIMESTAMP.read_bytes()))
    command = f"{sys.executable} -m core doctor <(gzip -dc {packed})"
    proc = subprocess.run(["bash", "-c", command], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    assert "4 rounds read" in proc.stdout and "first breaks in round 3" in proc.stdout


def test_a_gzip_log_is_read_as_gzip_and_a_bomb_is_bounded(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    packed = tmp_path / "agent.jsonl.gz"
    packed.write_bytes(gzip.compress(TIMESTAMP.read_bytes()[:600]) + gzip.compress(TIMESTAMP.read_bytes()[600:]))
    transcript = doctor.load_paths([packed])
    assert len(transcript.rounds) == 4 and "agent.jsonl.gz: read as gzip" in transcript.notes
    code, out, _ = _doctor(capsys, str(packed))
    assert code == 0 and "first breaks in round 3" in out
    bomb = tmp_path / "bomb.jsonl.gz"
    bomb.write_bytes(gzip.compress(b" " * 60_000_000, compresslevel=1))
    with pytest.raises(doctor.TranscriptError, match="bomb.jsonl.gz decompressed is larger than 50 MB"):
        doctor.load_paths([bomb])


def test_utf16_is_read_with_a_byte_order_mark_and_named_without_one(tmp_path: Path) -> None:
    text = TIMESTAMP.read_text()
    with_bom = tmp_path / "powershell.jsonl"
    with_bom.write_bytes(text.encode("utf-16"))  # PowerShell's `>` writes this
    transcript = doctor.load_paths([with_bom])
    assert len(transcript.rounds) == 4 and any("read as UTF-16" in note for note in transcript.notes)
    without = tmp_path / "bare.jsonl"
    without.write_bytes(text.encode("utf-16-le"))
    with pytest.raises(doctor.TranscriptError, match="bare.jsonl looks like UTF-16 text without a byte-order mark"):
        doctor.load_paths([without])


def test_invalid_utf8_names_its_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log = tmp_path / "agent.jsonl"
    log.write_bytes(("\n".join(LINES[:2]) + "\n").encode() + LINES[2].encode().replace(b"agent", b"ag\xffent", 1))
    code, _, err = _doctor(capsys, str(log))
    assert code == 2 and "agent.jsonl line 3 is not valid UTF-8" in err, err


def test_a_cut_string_is_said_without_at_at(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log = tmp_path / "agent.jsonl"
    log.write_text("\n".join([*LINES[:3], LINES[3][:80]]) + "\n")  # cut inside a string
    _, _, err = _doctor(capsys, str(log))
    assert "not read: agent.jsonl line 4: not valid JSON (Unterminated string starting at column" in err, err
    assert "at at" not in err


def test_a_round_after_a_line_not_read_is_named_by_its_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log = tmp_path / "agent.jsonl"
    log.write_text("\n".join([LINES[0], "garbage", *LINES[1:]]) + "\n")
    code, out, _ = _doctor(capsys, str(log), "--fail-on-break")
    assert code == 1
    assert "The cache first breaks in round 3 (agent.jsonl line 4):" in out, out
    assert "round 3 (agent.jsonl line 4):" in out, out


def test_a_key_given_twice_in_one_object_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log = tmp_path / "agent.jsonl"
    log.write_text("\n".join([*LINES[:2], LINES[2].replace('{"model": ', '{"model": "other", "model": ', 1),
                              *LINES[3:]]) + "\n")
    assert '"model": "other", "model"' in log.read_text()
    _, _, err = _doctor(capsys, str(log))
    assert "agent.jsonl line 3: the key 'model' is given twice in one object" in err, err
