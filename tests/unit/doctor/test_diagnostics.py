"""The provider's own cache verdict beside the doctor's (Anthropic ``diagnostics``, OpenAI
``prompt_cache_diagnostics``), and what the payload cannot show when the prefix was intact and the provider
still read less. The fixtures are written from the providers' documented examples (tests/data/README.md)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from core import doctor
from core.doctor.diagnostics import provider_diagnosis
from tests.support import DATA

FIXTURES = DATA / "doctor"


def analyse(name: str) -> doctor.Analysis:
    return doctor.analyse(doctor.load_paths([FIXTURES / f"{name}.jsonl"]))


def test_anthropic_diagnostics_beside_the_doctor():
    findings = analyse("diagnostics_anthropic").findings
    assert [f.provider_reason for f in findings] == [None, None, None, "system_changed", "messages_changed"]
    fourth, fifth = findings[3], findings[4]
    assert (fourth.cause, fourth.provider_section, fourth.provider_missed_tokens) == (
        doctor.SYSTEM_PROMPT_CHANGED, "system", 2160)
    assert fourth.diagnosis_agrees is True
    assert (fifth.breaks_cache, fifth.provider_section, fifth.diagnosis_agrees) == (False, "messages", False), \
        "the provider names a change the doctor does not see: they disagree, and it is said"


def test_openai_prompt_cache_diagnostics_beside_the_doctor():
    second = analyse("diagnostics_openai").findings[1]
    assert (second.cause, second.provider_reason, second.provider_section) == (doctor.TOOLS_CHANGED, "tools_changed",
                                                                               "tools")
    assert second.provider_missed_tokens == 1510 and second.diagnosis_agrees is True


@pytest.mark.parametrize("response,reason,section,missed", [
    ({"diagnostics": {"cache_miss_reason": {"type": "tools_changed", "cache_missed_input_tokens": 321}}},
     "tools_changed", "tools", 321),
    ({"diagnostics": {"cache_miss_reason": None}}, "pending", "inconclusive", None),
    ({"message": {"diagnostics": {"cache_miss_reason": {"type": "previous_message_not_found"}}}},
     "previous_message_not_found", "inconclusive", None),
    ({"prompt_cache_diagnostics": {"type": "cache_hit"}}, "cache_hit", "none", None),
    ({"prompt_cache_diagnostics": {"type": "cache_miss", "reason": "prompt_cache_key_changed",
                                   "cache_missed_tokens": 900}}, "prompt_cache_key_changed", "params", 900),
    ({"prompt_cache_diagnostics": {"type": "cache_miss", "reason": "a_reason_not_in_the_rules",
                                   "cache_missed_tokens": 5}}, "a_reason_not_in_the_rules", "inconclusive", 5),
    ({"usage": {"input_tokens": 10}}, None, None, None),
])
def test_diagnostics_in_every_documented_shape(response, reason, section, missed):
    found = provider_diagnosis(response)
    if reason is None:
        assert found is None
    else:
        assert found is not None and (found.reason, found.section, found.missed_tokens) == (reason, section, missed)


def test_what_the_payload_cannot_show():
    third = analyse("diagnostics_anthropic").findings[2]
    assert not third.breaks_cache and third.verdict == doctor.PROVIDER_MISSED
    assert (third.gap_seconds, third.lifetime_seconds) == (390.0, 300)
    assert third.unexplained == [doctor.GAP_OVER_LIFETIME]
    fifth = analyse("diagnostics_anthropic").findings[4]
    assert fifth.unexplained == [doctor.NOT_PROMISED], "30 s later, same key: nothing in the payload explains it"


def test_a_changed_cache_key_is_named():
    lines = (FIXTURES / "diagnostics_openai.jsonl").read_text().splitlines()
    first, second = json.loads(lines[0]), json.loads(lines[0])
    first["request"]["prompt_cache_key"] = "user-1"
    second["request"] = {**first["request"], "prompt_cache_key": "user-2",
                         "input": first["request"]["input"] + [{"role": "user", "content": "Thanks."}]}
    second["response"] = {"usage": {"input_tokens": 1530, "input_tokens_details": {"cached_tokens": 0}}}
    log = "\n".join(json.dumps(x) for x in (first, second)).encode()
    finding = doctor.analyse(doctor.load_inputs([("log.jsonl", log)])).findings[1]
    assert finding.breaks_cache and finding.cause == doctor.PARAMS_CHANGED, "prompt_cache_key is keyed: a break"
    first["request"]["user"], second["request"]["user"] = "alice", "bob"
    second["request"]["prompt_cache_key"] = "user-1"
    log = "\n".join(json.dumps(x) for x in (first, second)).encode()
    finding = doctor.analyse(doctor.load_inputs([("log.jsonl", log)])).findings[1]
    assert not finding.breaks_cache and finding.unexplained == [doctor.ROUTING_CHANGED]


@pytest.mark.slow
def test_cli_shows_both_verdicts_and_the_timeline_reasons():
    proc = subprocess.run([sys.executable, "-m", "core", "doctor", str(FIXTURES / "diagnostics_anthropic.jsonl")],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "the provider's diagnostics say system_changed (system, 2,160 tokens missed); the doctor says " \
           "system_prompt_changed: they agree" in proc.stdout
    assert "messages_changed (messages, 2,220 tokens missed); the doctor says no break: THEY DISAGREE" in proc.stdout
    assert "390 s after the previous round; lifetime 300 s" in proc.stdout
