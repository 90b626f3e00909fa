"""The doctor's mechanical fixes (core.doctor.fix): each fixable cause, the log's own format kept, the
fixed log re-read by the doctor, and the fix proven on the real embedded llama-server."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from core import doctor
from core.doctor import fix
from core.documents import default_document
from tests.support import DATA

FIXTURES = DATA / "doctor"


def _fixed(name: str) -> fix.FixedLog:
    return fix.fix_log(f"{name}.jsonl", (FIXTURES / f"{name}.jsonl").read_text())


def _bodies(text: str) -> list[dict]:
    items = [json.loads(line) for line in text.splitlines() if line.strip()]
    return [item.get("request", item) for item in items]


def _first_break(text: str, name: str = "fixed.jsonl") -> doctor.RoundFinding | None:
    return doctor.analyse(doctor.load_inputs([(name, text.encode())])).first_break


@pytest.mark.parametrize("name,cause,value", [("timestamp", doctor.TIMESTAMP, "Current time: "),
                                              ("random_id", doctor.RANDOM_ID, "Request id: ")])
def test_a_changing_value_at_the_start_moves_to_each_rounds_last_message(name, cause, value):
    fixed = _fixed(name)
    assert fixed.before is not None and fixed.before.first_break.cause == cause
    assert fixed.fixed == [cause] and fixed.left == []
    assert _first_break(fixed.text) is None
    original, bodies = _bodies((FIXTURES / f"{name}.jsonl").read_text()), _bodies(fixed.text)
    for old, new in zip(original, bodies, strict=True):
        moved = next(line for line in old["messages"][0]["content"].splitlines() if line.startswith(value))
        assert value not in new["messages"][0]["content"]  # the system prompt is the same every round
        assert new["messages"][-1]["content"].endswith("\n\n" + moved)  # the value still reaches the model
    # an earlier round's last message keeps the value it was sent with
    assert bodies[2]["messages"][3]["content"] == bodies[1]["messages"][3]["content"]


def test_tools_in_a_changing_order_are_sorted_by_name():
    fixed = _fixed("tool_order")
    assert fixed.fixed == [doctor.TOOL_ORDER] and _first_break(fixed.text) is None
    for body in _bodies(fixed.text):
        names = [tool["function"]["name"] for tool in body["tools"]]
        assert names == sorted(names)


def test_tools_with_keys_in_another_order_get_sorted_keys():
    fixed = _fixed("json_key_order")
    assert fixed.fixed == [doctor.JSON_KEY_ORDER] and _first_break(fixed.text) is None
    for body in _bodies(fixed.text):
        assert list(body["tools"][0]) == sorted(body["tools"][0])
        assert list(body["tools"][0]["function"]) == sorted(body["tools"][0]["function"])


def test_a_tool_result_with_keys_in_another_order_is_reserialised_with_sorted_keys(tmp_path):
    system = {"role": "system", "content": "You look up flights. " * 40}
    call = {"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "flights", "arguments": "{\"to\": \"HGH\"}"}}]}
    head = [system, {"role": "user", "content": "Flights to Hangzhou?"}, call]
    tail = [{"role": "assistant", "content": "MU at 420."}, {"role": "user", "content": "And cheaper?"},
            {"role": "assistant", "content": "None cheaper."}, {"role": "user", "content": "Book it."}]
    results = ['{"price": 420, "airline": "MU"}', '{"price": 420, "airline": "MU"}', '{"airline": "MU", "price": 420}']
    rounds = [head + [{"role": "tool", "tool_call_id": "c1", "content": result}] + tail[:2 * n]
              for n, result in enumerate(results)]
    text = "\n".join(json.dumps({"model": "m", "messages": m}) for m in rounds) + "\n"
    before = _first_break(text)
    assert before is not None and before.cause == doctor.JSON_KEY_ORDER and before.message_index == 3
    fixed = fix.fix_log("results.jsonl", text)
    assert fixed.fixed == [doctor.JSON_KEY_ORDER] and _first_break(fixed.text) is None
    assert {b["messages"][3]["content"] for b in _bodies(fixed.text)} == {'{"airline": "MU", "price": 420}'}


def test_anthropic_tools_sorted_keep_the_breakpoint_on_the_last_tool():
    tools = [{"name": n, "description": n, "input_schema": {"type": "object"}} for n in ("search", "read", "edit")]
    orders = [tools, tools, [tools[1], tools[0], tools[2]]]
    lines = []
    for n, order in enumerate(orders):
        listed = [dict(t) for t in order]
        listed[-1]["cache_control"] = {"type": "ephemeral"}
        messages = [{"role": "user", "content": "Fix the bug."}]
        messages += [m for i in range(n) for m in ({"role": "assistant", "content": f"Step {i}."},
                                                   {"role": "user", "content": "Go on."})]
        lines.append(json.dumps({"model": "claude-sonnet-4-5", "system": "You edit code. " * 50, "tools": listed,
                                 "messages": messages}))
    text = "\n".join(lines) + "\n"
    fixed = fix.fix_log("anthropic.jsonl", text)
    assert fixed.fixed == [doctor.TOOL_ORDER] and _first_break(fixed.text) is None
    for body in _bodies(fixed.text):
        assert [t["name"] for t in body["tools"]] == ["edit", "read", "search"]
        assert [("cache_control" in t) for t in body["tools"]] == [False, False, True]


def test_a_wrapped_log_keeps_its_responses_and_a_json_array_stays_an_array():
    captured = (FIXTURES / "scenario_captured.jsonl").read_text()
    fixed = fix.fix_log("captured.jsonl", captured)
    assert fixed.fixed == [doctor.TIMESTAMP] and _first_break(fixed.text) is None
    old_items = [json.loads(line) for line in captured.splitlines()]
    new_items = [json.loads(line) for line in fixed.text.splitlines()]
    assert [item["response"] for item in new_items] == [item["response"] for item in old_items]
    array = json.dumps({"requests": _bodies((FIXTURES / "timestamp.jsonl").read_text())})
    fixed_array = fix.fix_log("log.json", array)
    assert fixed_array.kind == "json" and len(json.loads(fixed_array.text)["requests"]) == 4
    assert _first_break(fixed_array.text, "log.json") is None


@pytest.mark.parametrize("name,left", [("clean", []), ("history_edited", [doctor.HISTORY_EDITED]),
                                       ("system_prompt_changed", [doctor.SYSTEM_PROMPT_CHANGED])])
def test_what_cannot_be_fixed_mechanically_is_left_byte_for_byte(name, left):
    fixed = _fixed(name)
    assert fixed.fixed == [] and fixed.left == left
    assert fixed.text == (FIXTURES / f"{name}.jsonl").read_text()


def test_a_text_input_cannot_be_fixed():
    with pytest.raises(doctor.TranscriptError, match="only a JSON or JSONL log"):
        fix.fix_log("prompt.txt", "You are a helpful agent.\n")


@pytest.mark.slow
def test_cli_write_fixed_gives_a_log_the_doctor_finds_no_break_in(tmp_path):
    out, report = tmp_path / "fixed.jsonl", tmp_path / "report.json"
    proc = subprocess.run([sys.executable, "-m", "core", "doctor", str(FIXTURES / "timestamp.jsonl"),
                           "--write-fixed", str(out), "--json", str(report)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "fix: the fixed log has no cache break." in proc.stdout
    assert json.loads(report.read_text())["fix"]["fixed"] == [doctor.TIMESTAMP]
    again = subprocess.run([sys.executable, "-m", "core", "doctor", str(out), "--fail-on-break"],
                           capture_output=True, text=True, timeout=120)
    assert again.returncode == 0 and "No round breaks the cache" in again.stdout


def _timestamp_first_log(rounds: int = 4, chars: int = 1600) -> str:
    """An agent that writes the time first in its system prompt, and a new time every round."""
    document = default_document()[:chars]
    lines, history = [], [{"role": "user", "content": "Summarise the first section."}]
    for n in range(rounds):
        system = {"role": "system", "content": f"Current time: 2026-12-01T09:{n:02d}:17Z\n{document}"}
        lines.append(json.dumps({"model": "agent", "messages": [system, *history]}))
        history += [{"role": "assistant", "content": f"Summary {n + 1}: the section explains prefill."},
                    {"role": "user", "content": f"Now section {n + 2}."}]
    return "\n".join(lines) + "\n"


@pytest.mark.llama
def test_the_fix_is_proven_on_the_embedded_server(local):
    text = _timestamp_first_log()
    fixed = fix.fix_log("agent.jsonl", text)
    assert fixed.fixed == [doctor.TIMESTAMP] and _first_break(fixed.text) is None
    original = doctor.load_inputs([("agent.jsonl", text.encode())])
    rows = list(fix.prove(original, fix.fixed_transcript("agent.jsonl", fixed), local.backend))
    assert [r.error for r in rows] == [""] * 8
    table = fix.proof_table(rows)
    assert [r.round for r in table] == [1, 2, 3, 4]
    assert table[0].after_recomputed >= 0.9 * table[0].after_prompt, "each replay starts cold"
    for row in table[1:]:
        assert row.before_recomputed >= 0.9 * row.before_prompt, "as logged, every round recomputes nearly all"
        assert row.after_recomputed <= 80, "fixed, only the new tail is recomputed"
        assert row.after_prompt >= row.before_prompt  # nothing was dropped: the time moved to the end


def test_a_changing_time_inside_a_tool_result_is_data_and_stays():
    system = {"role": "system", "content": "You check the build. " * 40}
    call = {"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "status", "arguments": "{}"}}]}
    results = ["checked at 2026-12-01T09:00:00Z: green", "checked at 2026-12-01T09:00:00Z: green",
               "checked at 2026-12-01T09:04:10Z: green"]
    tail = [{"role": "assistant", "content": "Green."}, {"role": "user", "content": "Again?"},
            {"role": "assistant", "content": "Still green."}, {"role": "user", "content": "Thanks."}]
    rounds = [[system, {"role": "user", "content": "Is the build green?"}, call,
               {"role": "tool", "tool_call_id": "c1", "content": result}] + tail[:2 * n]
              for n, result in enumerate(results)]
    text = "\n".join(json.dumps({"model": "m", "messages": m}) for m in rounds) + "\n"
    before = _first_break(text)
    assert before is not None and before.cause == doctor.TIMESTAMP and before.message_index == 3
    fixed = fix.fix_log("build.jsonl", text)
    assert fixed.fixed == [] and fixed.left == [doctor.TIMESTAMP] and fixed.text == text


def test_a_raw_line_separator_inside_a_message_keeps_the_rounds_aligned():
    """The capture proxy writes U+2028 raw inside a JSON string: one line of the log, not two."""
    text = (FIXTURES / "timestamp.jsonl").read_text().replace("You are", "You\u2028are")  # in every round
    assert "\u2028" in text
    fixed = fix.fix_log("timestamp.jsonl", text)
    assert fixed.fixed == [doctor.TIMESTAMP] and _first_break(fixed.text) is None
    assert fixed.text.count("\n") == text.count("\n") and "\u2028" in fixed.text


def test_a_line_separator_in_one_round_only_is_named_not_an_index_error():
    text = (FIXTURES / "timestamp.jsonl").read_text().replace("You are", "You\u2028are", 1)
    fixed = fix.fix_log("timestamp.jsonl", text)
    assert fixed.before is not None and fixed.text.count("\n") == text.count("\n")
