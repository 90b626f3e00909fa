"""Cache doctor: every input format, one fixture per cause, unreadable input, provider rules, the
breakpoint audit, measured against predicted, the CLI, and a live replay."""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib

import httpx
import pytest

from core import doctor
from core.backends import LlamaServerBackend, OpenAICompatBackend
from core.capture.proxy import CaptureServer
from core.doctor.rules import RULES_FILE
from core.documents import default_document
from tests.support import DATA

FIXTURES = DATA / "doctor"
SCENARIO = {"scenario_chat": doctor.CHAT, "scenario_responses": doctor.RESPONSES,
            "scenario_anthropic": doctor.ANTHROPIC, "scenario_gemini": doctor.GEMINI,
            "scenario_captured": doctor.ANTHROPIC}


def analyse(name: str) -> doctor.Analysis:
    return doctor.analyse(doctor.load_paths([FIXTURES / f"{name}.jsonl"]))


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "core", "doctor", *args], capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("name,message_index,field", [
    ("timestamp", 0, "content"), ("random_id", 0, "content"), ("tool_order", None, "tools"),
    ("json_key_order", None, "tools"), ("whitespace", 0, "content"), ("history_truncated", 1, "content"),
    ("history_edited", 2, "content"), ("system_prompt_changed", 0, "content"), ("model_changed", None, "model"),
    ("params_changed", None, "params"), ("tools_changed", None, "tools"), ("thinking_stripped", 2, "content"),
    ("image_reencoded", 1, "image"),
])
def test_each_cause_is_found_where_it_is(name, message_index, field):
    analysis = analyse(name)
    first = analysis.first_break
    assert first is not None and first.round == 3, "rounds 1-2 of every fixture are clean"
    assert (first.cause, first.message_index, first.field) == (name, message_index, field)
    assert first.recomputed_tokens > first.append_only_recomputed_tokens
    assert "<mark>" in first.old_snippet and "<mark>" in first.new_snippet
    assert not any(f.breaks_cache for f in analysis.findings[:2])


def diagnosis(analysis: doctor.Analysis) -> list[tuple]:
    return [(f.round, f.breaks_cache, f.cause, f.message_index, f.field) for f in analysis.findings]


def test_the_same_rounds_get_the_same_diagnosis_in_every_format():
    """One agent's rounds (a clock line in the system prompt changes in round 3) written in each format."""
    expected = [(1, False, "none", None, None), (2, False, "none", None, None), (3, True, "timestamp", 0, "content"),
                (4, False, "none", None, None)]
    for name, fmt in SCENARIO.items():
        analysis = analyse(name)
        assert analysis.formats == [fmt], name
        assert diagnosis(analysis) == expected, name


@pytest.mark.parametrize("line,fmt", [
    ({"messages": [{"role": "user", "content": "hi"}]}, doctor.CHAT),
    ({"system": "Be brief.", "messages": [{"role": "user", "content": "hi"}]}, doctor.ANTHROPIC),
    ({"request": {"messages": [{"role": "user", "content": "hi"}]}, "endpoint": "/v1/messages"}, doctor.ANTHROPIC),
    ({"tools": [{"name": "f", "input_schema": {}}], "messages": [{"role": "user", "content": "hi"}]}, doctor.ANTHROPIC),
    ({"messages": [{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "content": "1"}]}]},
     doctor.ANTHROPIC),
    ({"input": "hi"}, doctor.RESPONSES), ({"instructions": "Be brief.", "input": []}, doctor.RESPONSES),
    ({"contents": [{"role": "user", "parts": [{"text": "hi"}]}]}, doctor.GEMINI),
    ({"request_body": {"contents": [{"parts": [{"text": "hi"}]}]}, "response_body": {}}, doctor.GEMINI),
])
def test_format_is_detected_per_line(line, fmt):
    assert doctor.load_inputs([("log.jsonl", json.dumps(line).encode())]).formats == [fmt]


def test_one_pretty_printed_request_is_one_round():
    body = json.loads((FIXTURES / "scenario_anthropic.jsonl").read_text().splitlines()[0])
    transcript = doctor.load_inputs([("request.json", json.dumps(body, indent=2).encode())])
    assert (transcript.kind, transcript.formats, len(transcript.rounds)) == ("json", [doctor.ANTHROPIC], 1)


def test_a_change_in_any_part_that_reaches_the_model_is_found():
    """Anthropic: the system blocks, tools and content blocks are all rendered (a silent all-clear before)."""
    bodies = [json.loads(line) for line in (FIXTURES / "scenario_anthropic.jsonl").read_text().splitlines()[2:]]
    for path, value in ((("system", 0, "text"), "Request 7f3a9c2e-1b4d-4e8f-9a6b-2c5d8e1f0a3b"),
                        (("tools", 1, "description"), "Run pytest, now with coverage"),
                        (("messages", 1, "content", 0, "input"), {"path": "lexer.py"})):
        edited = json.loads(json.dumps(bodies[1]))
        target = edited
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = value
        log = "\n".join(json.dumps(b) for b in (bodies[0], edited)).encode()
        finding = doctor.analyse(doctor.load_inputs([("log.jsonl", log)])).findings[1]
        assert finding.breaks_cache, path


@pytest.mark.slow
def test_unrecognised_lines_are_named_never_an_all_clear():
    transcript = doctor.load_paths([FIXTURES / "unrecognised.jsonl"])
    assert transcript.rounds == []
    assert transcript.errors[0].startswith("unrecognised.jsonl line 1: expected a request body with \"messages\"")
    assert "got keys ['max_tokens', 'prompt']" in transcript.errors[0] and "line 2" in transcript.errors[1]
    proc = cli(str(FIXTURES / "unrecognised.jsonl"))
    assert proc.returncode == 2 and "no round could be read from" in proc.stderr and "line 2" in proc.stderr
    assert "No round breaks" not in proc.stdout


@pytest.mark.slow
def test_malformed_lines_are_named_and_the_rest_analysed():
    analysis = analyse("malformed")
    assert len(analysis.findings) == 2
    assert any("line 2: not valid JSON" in e for e in analysis.errors)
    assert any("line 3: expected a request body" in e for e in analysis.errors)
    proc = cli(str(FIXTURES / "malformed.jsonl"))
    assert proc.returncode == 0 and "2 lines could not be read" in proc.stdout and "No round breaks" not in proc.stdout


@pytest.mark.slow
def test_previous_response_id_says_the_history_cannot_be_checked():
    analysis = analyse("responses_chained")
    assert [f.cause for f in analysis.findings[1:]] == [doctor.SERVER_HISTORY] * 2
    assert "the history lives on the server and cannot be checked" in analysis.notes[0]
    proc = cli(str(FIXTURES / "responses_chained.jsonl"))
    assert "cannot be checked" in proc.stdout and "No round breaks" not in proc.stdout


def test_changing_value_at_the_very_end_is_not_a_breaker():
    analysis = analyse("end_of_prompt")
    assert analysis.first_break is None
    assert [f.cause for f in analysis.findings[1:]] == [doctor.END_OF_PROMPT] * 3
    assert all(f.cacheable_fraction > 0.8 for f in analysis.findings[1:])


def test_a_developer_message_is_a_system_prompt():
    bodies = [json.loads(line) for line in (FIXTURES / "system_prompt_changed.jsonl").read_text().splitlines()]
    for body in bodies:
        body["messages"][0]["role"] = "developer"
    analysis = doctor.analyse(doctor.load_inputs([("log.json", json.dumps(bodies).encode())]))
    assert analysis.first_break.cause == doctor.SYSTEM_PROMPT_CHANGED


def test_clean_transcript_has_no_breaker():
    analysis = analyse("clean")
    assert analysis.first_break is None and all(f.cause == doctor.NONE for f in analysis.findings)
    assert all(f.recomputed_tokens == f.append_only_recomputed_tokens for f in analysis.findings)


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
    prompt = transcript.rounds[0].messages[0].text()
    append = doctor.analyse(doctor.simulate(prompt, "append_only", 4))
    stamp = doctor.analyse(doctor.simulate(prompt, "timestamp_first", 4))
    assert append.first_break is None
    assert stamp.first_break.round == 2 and stamp.first_break.cause == doctor.TIMESTAMP
    assert stamp.totals()["recomputed"] > 3 * append.totals()["recomputed"]


def test_every_rule_has_a_source_and_a_date():
    data = tomllib.loads(RULES_FILE.read_text())
    assert {"OpenAI", "Anthropic", "DeepSeek", "Gemini", "llama-server"} <= {r["name"] for r in data["rule"]}
    for rule in data["rule"]:
        assert rule["source"].startswith("https://") and rule["checked"] >= "2026-11-30", rule["name"]
    assert "api-docs.deepseek.com/guides/kv_cache" in doctor.BILLING_RULES["DeepSeek"].source


def test_openai_steps_and_anthropic_minimum_per_model():
    openai, anthropic = doctor.BILLING_RULES["OpenAI"], doctor.BILLING_RULES["Anthropic"]
    assert openai.cached(1000, 1500) == 0, "nothing below 1024 tokens"
    assert openai.cached(1300, 1500) == 1280, "then in 128-token steps"
    assert openai.cost(1280, 1500) == pytest.approx((220 * 0.15 + 1280 * 0.075) / 1e6)
    assert anthropic.minimum_for("claude-haiku-4-5-20251001") == 4096
    assert anthropic.minimum_for("claude-sonnet-4-5") == 1024
    assert anthropic.cost(0, 1000, written_tokens=1000, ttl="1h") == pytest.approx(2 * anthropic.cost(0, 1000))


def rounds_log(*bodies: list[dict]) -> doctor.Analysis:
    log = "\n".join(json.dumps({"model": "deepseek-chat", "messages": messages}) for messages in bodies)
    return doctor.analyse(doctor.load_inputs([("log.jsonl", log.encode())]))


def test_deepseek_bills_whole_cache_prefix_units():
    """Its guide: A+B then A+C misses; a third request A+D hits on A; A+B+answer+C hits on A+B."""
    a = {"role": "system", "content": "A long shared context. " * 300}  # about 1,700 tokens
    analysis = rounds_log([a, {"role": "user", "content": "B"}], [a, {"role": "user", "content": "C"}],
                          [a, {"role": "user", "content": "D"}])
    deepseek = doctor.billing(analysis, doctor.BILLING_RULES["DeepSeek"])
    openai = doctor.billing(analysis, doctor.BILLING_RULES["OpenAI"])
    assert [r["cached_tokens"] for r in deepseek][:2] == [0, 0] and openai[1]["cached_tokens"] > 1024
    assert abs(deepseek[2]["cached_tokens"] - analysis.counter.count(a["content"])) < 16
    assert analysis.findings[2].provider == "DeepSeek", "chosen from the model name"
    b, answer = {"role": "user", "content": "B"}, {"role": "assistant", "content": "b"}
    grown = rounds_log([a, b], [a, b, answer, {"role": "user", "content": "C"}])
    billed = doctor.billing(grown, doctor.BILLING_RULES["DeepSeek"])
    after_answer = grown.rendered[1].message_starts[3]
    assert billed[1]["cached_tokens"] == grown.counter.count(grown.rendered[1].text[:after_answer]), \
        "the first request with its answer is one unit"


def test_anthropic_bills_reads_and_writes_at_breakpoints():
    analysis = analyse("scenario_anthropic")
    rows = doctor.billing(analysis, doctor.BILLING_RULES["Anthropic"])
    first_end = analysis.rendered[0].breakpoints[-1].end
    assert rows[0]["cached_tokens"] == 0
    assert rows[0]["written_tokens"] == analysis.counter.count(analysis.rendered[0].text[:first_end])
    assert rows[1]["cached_tokens"] == analysis.counter.count(analysis.rendered[1].text[:first_end])
    assert rows[2]["cached_tokens"] == 0, "the clock line in the system prompt changed: nothing is read"
    assert rows[2]["cost"] > rows[1]["cost"]


def test_breakpoint_audit():
    items = doctor.audit(analyse("scenario_captured"))
    by_round = {(i.round, i.where): i.issues for i in items}
    assert "dynamic_before" in by_round[(1, "system")], "the clock line sits before the system breakpoint"
    assert "ttl_short" in by_round[(2, "message 3")], "6 min 20 s until round 3 with a 5-minute TTL"
    assert "ttl_short" not in by_round[(1, "message 1")]
    assert "unstable_prefix" in by_round[(3, "system")] and "unstable_prefix" not in by_round[(4, "system")]
    assert doctor.audit(analyse("params_changed"))[0].issues == ["no_breakpoint"]
    small = json.loads((FIXTURES / "scenario_anthropic.jsonl").read_text().splitlines()[0])
    small["system"][0]["text"] = "Short."
    small["model"] = "claude-3-5-haiku-latest"
    analysis = doctor.analyse(doctor.load_inputs([("log.jsonl", json.dumps(small).encode())]))
    assert "below_minimum" in doctor.audit(analysis)[0].issues


def anthropic_log(*bodies: dict) -> doctor.Analysis:
    return doctor.analyse(doctor.load_inputs([("log.jsonl", "\n".join(json.dumps(b) for b in bodies).encode())]))


def marked(text: str) -> dict:
    return {"type": "text", "text": text, "cache_control": {"type": "ephemeral"}}


def test_anthropic_lookback_breakpoint_count_and_automatic_caching():
    system = [marked("You review pull requests. " * 200)]
    first = {"model": "claude-sonnet-4-5", "system": system,
             "messages": [{"role": "user", "content": [marked("PR 1")]}]}
    turns = [{"role": "assistant" if i % 2 else "user", "content": f"turn {i}"} for i in range(22)]
    moved = [{"role": "user", "content": "PR 1"}] + turns[1:] + [{"role": "user", "content": [marked("go")]}]
    analysis = anthropic_log(first, {**first, "messages": moved})  # the marker moved 22 blocks on
    issues = {i.issues[0] for i in doctor.audit(analysis) if i.round == 2 and i.where == "request"}
    assert issues == {"lookback_exceeded"}, "22 blocks after round 1's last breakpoint"
    rows = doctor.billing(analysis, doctor.BILLING_RULES["Anthropic"])
    system_end = analysis.rendered[0].breakpoints[0].end
    assert rows[1]["cached_tokens"] == analysis.counter.count(analysis.rendered[1].text[:system_end]), \
        "only the system prompt is read: the write at message 1 is beyond the lookback"
    five = {**first, "messages": [{"role": "user", "content": [marked(f"part {i}") for i in range(4)]}]}
    assert "too_many_breakpoints" in doctor.audit(anthropic_log(five))[0].issues
    automatic = {"model": "claude-sonnet-4-5", "cache_control": {"type": "ephemeral"}, "system": "Be brief. " * 500,
                 "messages": [{"role": "user", "content": "hi"}]}
    item = doctor.audit(anthropic_log(automatic))[0]
    assert (item.where, item.issues) == ("automatic", [])


def test_replay_sends_other_formats_as_plain_chat():
    round_ = doctor.load_paths([FIXTURES / "scenario_anthropic.jsonl"]).rounds[1]

    class Api:
        kind = "api"

    request = doctor.replay_request(round_, Api())
    assert "tools" not in request.extra, "Anthropic tool definitions are not sent to a chat endpoint"
    assert request.messages[0]["role"] == "system" and request.messages[0]["content"].startswith("[tools]")
    assert all(isinstance(m["content"], str) for m in request.messages)
    assert [m["role"] for m in request.messages] == ["system", "user", "assistant", "user"]


def test_times_in_any_shape_are_compared():
    body = json.loads((FIXTURES / "scenario_anthropic.jsonl").read_text().splitlines()[0])
    lines = [{"request": body, "time": "2026-11-30T05:00:00"}, {"request": body, "timestamp": 1796015400},
             {"request": body, "created_at": 1796015410000}]
    analysis = doctor.analyse(doctor.load_inputs([("log.jsonl", "\n".join(map(json.dumps, lines)).encode())]))
    ttl = {item.round for item in doctor.audit(analysis) if "ttl_short" in item.issues}
    assert ttl == {1}, "10 minutes after round 1 (naive ISO, as UTC), 10 s after round 2 (epoch s, then ms)"


def test_measured_next_to_predicted():
    analysis = analyse("scenario_captured")
    assert [f.measured_cached_tokens for f in analysis.findings] == [0, 1400, 0, 0]
    assert [f.verdict for f in analysis.findings] == ["agree", "agree", "agree", doctor.PROVIDER_MISSED]
    assert analysis.findings[3].predicted_cached_tokens > 1000, "the prefix was intact: the provider missed"


@pytest.mark.parametrize("usage,cached", [
    ({"usage": {"prompt_tokens": 2000, "prompt_tokens_details": {"cached_tokens": 1920}}}, 1920),
    ({"usage": {"input_tokens": 2000, "input_tokens_details": {"cached_tokens": 1792}}}, 1792),
    ({"usage": {"prompt_tokens": 2000, "prompt_cache_hit_tokens": 1984, "prompt_cache_miss_tokens": 16}}, 1984),
    ({"usageMetadata": {"promptTokenCount": 2000, "cachedContentTokenCount": 1500}}, 1500),
    ({"timings": {"prompt_n": 12, "cache_n": 1988}}, 1988),
])
def test_usage_in_every_shape_is_read(usage, cached):
    body = json.loads((FIXTURES / "scenario_chat.jsonl").read_text().splitlines()[0])
    line = json.dumps({"request": body, "response": usage}).encode()
    analysis = doctor.analyse(doctor.load_inputs([("log.jsonl", line)]))
    assert analysis.findings[0].measured_cached_tokens == cached and analysis.findings[0].measured_prompt_tokens == 2000


def test_comparison_finds_the_break_in_long_rounds():
    """Long rounds (the speed claim is in bench/doctor_scale.py): the break is located to the character."""
    base = "x" * 200_000
    log = "\n".join(json.dumps({"messages": [{"role": "system", "content": content}, {"role": "user", "content": "Q"}]})
                    for content in (base, base, base[:150_000] + "y" + base[150_001:]))
    analysis = doctor.analyse(doctor.load_inputs([("long.jsonl", log.encode())]))
    third = analysis.findings[2]
    assert third.breaks_cache and third.common_prefix_chars == len("[0 system]\n") + 150_000
    assert analysis.findings[1].common_prefix_chars == len(analysis.rendered[1].text)
    assert doctor.common_prefix_length(base, base + "more") == 200_000


@pytest.mark.slow
def test_cli_json_records(tmp_path):
    out = tmp_path / "findings.json"
    proc = cli(str(FIXTURES / "scenario_captured.jsonl"), "--json", str(out), "--provider", "Anthropic")
    assert proc.returncode == 0, proc.stderr
    assert "scenario_captured.jsonl: anthropic messages; 4 rounds read" in proc.stdout
    assert "first breaks in round 3: timestamp" in proc.stdout and "provider_missed" in proc.stdout
    data = json.loads(out.read_text())
    assert data["format"] == ["anthropic messages"]
    rounds = data["rounds"]
    assert [r["round"] for r in rounds] == [1, 2, 3, 4]
    third = rounds[2]
    assert third["breaks_cache"] is True and third["cause"] == "timestamp" and third["field"] == "content"
    for key in ("message_index", "first_diff_char", "common_prefix_tokens", "recomputed_tokens", "format"):
        assert key in third
    assert rounds[1]["measured_cached_tokens"] == 1400 and rounds[3]["verdict"] == "provider_missed"


@pytest.mark.slow
def test_cli_fail_on_break_and_allow():
    log = str(FIXTURES / "history_truncated.jsonl")
    failed = cli(log, "--fail-on-break")
    assert failed.returncode == 1
    assert failed.stdout.strip().splitlines()[-1].startswith("FAIL: 1 round(s) break the prompt cache; first: ")
    assert "round 3: history_truncated in message 1" in failed.stdout
    assert cli(log, "--fail-on-break", "--allow", "history_truncated").returncode == 0
    assert cli(str(FIXTURES / "clean.jsonl"), "--fail-on-break").returncode == 0


@pytest.mark.slow
def test_cli_refuses_binary_input(tmp_path):
    bad = tmp_path / "log.jsonl"
    bad.write_bytes(b"\x00\x00binary")
    proc = cli(str(bad))
    assert proc.returncode == 2 and "binary" in proc.stderr


@pytest.mark.slow
@pytest.mark.parametrize("name,endpoint", [("scenario_chat", "/v1/chat/completions"),
                                           ("scenario_anthropic", "/v1/messages")])
def test_the_capture_proxys_log_is_read_with_its_usage(fake_api, tmp_path, name, endpoint):
    """The rounds sent through `python -m core capture` to a real (fake) upstream, then the log itself."""
    log = tmp_path / "capture.jsonl"
    fake_api.cached_script = [0, 1200, 0, 1300]
    with CaptureServer(fake_api.base_url, log) as proxy:
        for line in (FIXTURES / f"{name}.jsonl").read_text().splitlines():
            body = {**json.loads(line), "stream": True, "stream_options": {"include_usage": True}}
            sent = httpx.post(proxy.base_url + endpoint, json=body, headers={"x-api-key": "sk-test-never-logged"},
                              timeout=30)
            assert sent.status_code == 200
    assert "sk-test-never-logged" not in log.read_text()
    analysis = doctor.analyse(doctor.load_paths([log]))
    assert diagnosis(analysis) == diagnosis(analyse(name))
    assert all(f.measured_cached_tokens is not None and f.verdict for f in analysis.findings)
    if name == "scenario_chat":
        assert [f.measured_cached_tokens for f in analysis.findings] == [0, 1200, 0, 1300]
    else:  # the fake reads and writes at breakpoints as Anthropic does: nothing read after the clock changed
        assert analysis.findings[1].measured_cached_tokens > 1000 and analysis.findings[2].measured_cached_tokens == 0


@pytest.mark.llama
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


@pytest.mark.llama
def test_replay_of_an_anthropic_log_on_the_real_server(local):
    """The server recomputes what the doctor says: everything in round 3 (the clock line), little otherwise."""
    transcript = doctor.load_paths([FIXTURES / "scenario_anthropic.jsonl"])
    rows = list(doctor.replay(transcript, local.backend))
    assert [r.error for r in rows] == [""] * 4
    assert rows[2].recomputed_tokens >= 0.8 * rows[2].prompt_tokens
    for row in (rows[1], rows[3]):
        assert row.recomputed_tokens <= 0.2 * row.prompt_tokens


def test_replayed_tools_go_in_a_preamble_for_llama_server_and_as_tools_for_an_api():
    round_ = doctor.load_paths([FIXTURES / "tool_order.jsonl"]).rounds[0]
    assert round_.raw_tools
    to_llama = doctor.replay_request(round_, LlamaServerBackend("http://127.0.0.1:9"))
    assert to_llama.messages[0]["content"].startswith("[tools]\n") and "tools" not in to_llama.extra
    to_api = doctor.replay_request(round_, OpenAICompatBackend("http://127.0.0.1:9/v1", "m"))
    assert to_api.extra["tools"] == round_.raw_tools and not to_api.messages[0]["content"].startswith("[tools]")


@pytest.mark.slow
@pytest.mark.parametrize("name,text,needle", [
    ("agent.log", '2025-01-01T10:00:00Z INFO request {"messages": [{"role": "user", "content": "hi"}]}\n',
     "line 1: expected a JSON request body"),
    ("one_round.jsonl", '{"messages": [{"role": "user", "content": "hi"}]}\n', "only one round"),
    ("prompt.txt", "You are a helpful agent.\n", "only one round"),
])
def test_cli_gives_no_all_clear_for_what_it_cannot_compare(tmp_path, name, text, needle):
    path = tmp_path / name
    path.write_text(text)
    proc = subprocess.run([sys.executable, "-m", "core", "doctor", "--fail-on-break", str(path)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and needle in proc.stderr
    assert "No round breaks" not in proc.stdout
