"""The decode-step convention (`core.records.decode_timing`) checked against the real embedded llama-server and
its own log: ``predicted_ms`` covers ``predicted_n - 1`` decode steps."""

from __future__ import annotations

import re
import time

import pytest

from core.backends.base import ChatRequest
from core.experiments.prompts import nonce, output_length_messages
from core.records import RoundResult


def test_predicted_ms_covers_the_steps_after_the_first_token(local, local_server):
    one = local.backend.stream_chat(ChatRequest(output_length_messages(nonce()), max_tokens=1, ignore_eos=True))
    assert one.success and one.server_decode_tokens == 1
    assert one.server_decode_ms is not None and one.server_decode_ms < 1.0  # the first token costs no decode step
    assert RoundResult.from_request("x", 1, one).ms_per_output_token is None
    many = local.backend.stream_chat(ChatRequest(output_length_messages(nonce()), max_tokens=16, ignore_eos=True))
    row = RoundResult.from_request("x", 1, many)
    assert many.server_decode_tokens == 16 and row.decode_source == "server"
    assert row.ms_per_output_token == pytest.approx(many.server_decode_ms / 15, abs=0.001)
    # the stream's gaps after the first token are the same 15 steps, each a little later (the HTTP path)
    gaps = many.inter_token_s
    assert len(gaps) == 15 and row.ms_per_output_token == pytest.approx(sum(gaps) / 15 * 1000, rel=0.2)
    # the log counts the same tokens over the same milliseconds (and so divides by 16 too); the server writes
    # that line after the response's last byte, so it is waited for, not read once
    expected = (pytest.approx(many.server_decode_ms, abs=0.01), "16")
    deadline = time.monotonic() + 120
    while True:
        logged = re.findall(r"\beval time =\s*([\d.]+) ms /\s*(\d+) tokens", local_server.log_path.read_text())
        if expected in [(float(ms), n) for ms, n in logged] or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert expected in [(float(ms), n) for ms, n in logged]
