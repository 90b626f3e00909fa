"""Cache doctor: one fixture transcript per cause, bad input, billing rules, the CLI, and a live replay."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from core import doctor
from core.prompts import default_document

FIXTURES = Path(__file__).parent / "data" / "doctor"


def analyse(name: str) -> doctor.Analysis:
    return doctor.analyse(doctor.load_paths([FIXTURES / f"{name}.jsonl"]))


@pytest.mark.parametrize("name,message_index,field", [
    ("timestamp", 0, "content"), ("random_id", 0, "content"), ("tool_order", None, "tools"),
    ("json_key_order", None, "tools"), ("whitespace", 0, "content"), ("history_truncated", 1, "content"),
    ("history_edited", 2, "content"), ("system_prompt_changed", 0, "content"),
])
def test_each_cause_is_found_where_it_is(name, message_index, field):
    analysis = analyse(name)
    first = analysis.first_break
    assert first is not None and first.round == 3, "rounds 1-2 of every fixture are clean"
    assert (first.cause, first.message_index, first.field) == (name, message_index, field)
    assert first.recomputed_tokens > first.append_only_recomputed_tokens
    assert "<mark>" in first.old_snippet and "<mark>" in first.new_snippet
    assert not any(f.breaks_cache for f in analysis.findings[:2])


def test_clean_transcript_has_no_breaker():
    analysis = analyse("clean")
    assert analysis.first_break is None
    assert all(f.cause == doctor.NONE for f in analysis.findings)
    assert all(f.recomputed_tokens == f.append_only_recomputed_tokens for f in analysis.findings)


def test_changing_value_at_the_very_end_is_not_a_breaker():
    analysis = analyse("end_of_prompt")
    assert analysis.first_break is None
    assert [f.cause for f in analysis.findings[1:]] == [doctor.END_OF_PROMPT] * 3
    assert all(f.cacheable_fraction > 0.8 for f in analysis.findings[1:])


def test_malformed_lines_are_named_and_the_rest_analysed():
    analysis = analyse("malformed")
    assert len(analysis.findings) == 2
    assert any("line 2: not valid JSON" in e for e in analysis.errors)
    assert any('line 3: no "messages" list' in e for e in analysis.errors)


@pytest.mark.parametrize("data,needle", [(b"", "empty"), (b"\x00\x01\x02", "binary"), (b"\xff\xfe\xfa", "UTF-8")])
def test_unreadable_input_is_refused(data, needle):
    with pytest.raises(doctor.TranscriptError, match=needle):
        doctor.load_inputs([("log.jsonl", data)])


def test_oversized_input_is_refused():
    with pytest.raises(doctor.TranscriptError, match="larger than"):
        doctor.load_inputs([("log.jsonl", b"{}" * 100)], max_bytes=50)


def test_json_array_and_text_files_per_round():
    bodies = [json.loads(line) for line in (FIXTURES / "timestamp.jsonl").read_text().splitlines()]
    array = doctor.load_inputs([("log.json", json.dumps(bodies).encode())])
    assert array.kind == "json" and doctor.analyse(array).first_break.cause == doctor.TIMESTAMP
    body = b"\nThe same long instructions, every round. " * 40
    files = doctor.load_inputs([("round_02.txt", b"Request id: 9b2d4e6f-1a3c-4e5f-8a7b-0c1d2e3f4a5b" + body),
                                ("round_01.txt", b"Request id: 0d9e8f7a-6b5c-4d3e-9f2a-1b0c9d8e7f6a" + body)])
    assert files.kind == "files" and files.rounds[0].source == "round_01.txt"
    assert doctor.analyse(files).first_break.cause == doctor.RANDOM_ID


def test_single_text_file_is_a_system_prompt_compared_by_strategy():
    transcript = doctor.load_inputs([("system.md", b"You are a helpful agent. " * 40)])
    assert transcript.kind == "system_prompt"
    prompt = transcript.rounds[0].messages[0]["content"]
    append = doctor.analyse(doctor.simulate(prompt, "append_only", 4))
    stamp = doctor.analyse(doctor.simulate(prompt, "timestamp_first", 4))
    assert append.first_break is None
    assert stamp.first_break.round == 2 and stamp.first_break.cause == doctor.TIMESTAMP
    assert stamp.totals()["recomputed"] > 3 * append.totals()["recomputed"]


def test_provider_billing_rules():
    openai, deepseek = doctor.BILLING_RULES["OpenAI (gpt-4o-mini)"], doctor.BILLING_RULES["DeepSeek (deepseek-chat)"]
    assert openai.cached(1000, 1500) == 0, "nothing below 1024 tokens"
    assert openai.cached(1300, 1500) == 1280, "then in 128-token steps"
    assert deepseek.cached(1300, 1500) == 1280 and deepseek.cached(100, 1500) == 64
    assert openai.cost(1280, 1500) == pytest.approx((220 * 0.15 + 1280 * 0.075) / 1e6)


def test_comparison_is_fast_on_long_rounds():
    a = "x" * 200_000
    assert doctor.common_prefix_length(a, a[:150_000] + "y" + a[150_001:]) == 150_000
    assert doctor.common_prefix_length(a, a + "more") == 200_000


def test_cli_json_records(tmp_path):
    out = tmp_path / "findings.json"
    proc = subprocess.run([sys.executable, "-m", "core", "doctor", str(FIXTURES / "tool_order.jsonl"), "--json", str(out),
                           "--provider", "DeepSeek (deepseek-chat)"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "first breaks in round 3: tool_order" in proc.stdout
    rounds = json.loads(out.read_text())["rounds"]
    assert [r["round"] for r in rounds] == [1, 2, 3, 4]
    third = rounds[2]
    assert third["breaks_cache"] is True and third["cause"] == "tool_order" and third["field"] == "tools"
    for key in ("message_index", "first_diff_char", "common_prefix_tokens", "recomputed_tokens"):
        assert key in third


def test_cli_refuses_binary_input(tmp_path):
    bad = tmp_path / "log.jsonl"
    bad.write_bytes(b"\x00\x00binary")
    proc = subprocess.run([sys.executable, "-m", "core", "doctor", str(bad)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "binary" in proc.stderr


def test_replay_on_the_real_server(local):
    document = default_document()[:2500]
    stamp = list(doctor.replay(doctor.simulate(document, "timestamp_first", 3), local.backend))
    clean = list(doctor.replay(doctor.simulate(document, "append_only", 3), local.backend))
    assert [r.error for r in stamp + clean] == [""] * 6
    for row in stamp[1:]:
        assert row.recomputed_tokens >= 0.9 * row.prompt_tokens
    for row in clean[1:]:
        assert row.recomputed_tokens <= 64, "a clean transcript recomputes a few dozen tokens"
    exact = doctor.analyse(doctor.simulate(document, "append_only", 3), local.counter, local.backend)
    assert exact.rendering.startswith("chat template") and exact.findings[0].tokens_exact
    assert abs(exact.findings[0].prompt_tokens - clean[0].prompt_tokens) <= 8
