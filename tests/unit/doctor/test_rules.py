"""Provider rules from rules.toml: each provider's own minimum, step and cache lifetime with its source, the
rule chosen by endpoint host, model, usage field and format, the thinking rule per model family, and the
breakpoint audit leaving the doctor's own stand-ins alone."""

from __future__ import annotations

import json
import tomllib

import pytest

from core import doctor
from core.doctor.model import Round
from core.doctor.rules import BILLING_RULES, RULES_FILE, rule_for

RULES = tomllib.loads(RULES_FILE.read_text())


def analyse(*lines: dict) -> doctor.Analysis:
    return doctor.analyse(doctor.load_inputs([("log.jsonl", "\n".join(json.dumps(x) for x in lines).encode())]))


def test_every_rule_and_lifetime_has_a_source_and_a_date():
    names = {r["name"] for r in RULES["rule"]}
    assert names >= {"OpenAI", "Anthropic", "DeepSeek", "Gemini", "Mistral", "Groq", "xAI", "OpenAI-compatible"}
    for rule in RULES["rule"]:
        assert rule["source"].startswith("https://") and rule["checked"] >= "2026-11-30", rule["name"]
        if rule.get("lifetimes"):
            assert "https://" in rule["lifetime_source"] and "checked 2026-" in rule["lifetime_source"], rule["name"]
    for name, entry in RULES["diagnostics"].items():
        assert entry["source"].startswith("https://") and entry["checked"] >= "2026-12-01" and entry["fields"], name
    assert RULES["diagnostics"]["anthropic"]["field"] == "diagnostics.cache_miss_reason"
    assert RULES["diagnostics"]["openai"]["field"] == "prompt_cache_diagnostics"


@pytest.mark.parametrize("endpoint,model,expected", [
    ("https://api.openai.com/v1/chat/completions", "gpt-4o", "OpenAI"),
    ("https://api.anthropic.com/v1/messages", "claude-sonnet-4-5", "Anthropic"),
    ("https://api.deepseek.com/responses", "deepseek-v4", "DeepSeek"),
    ("https://api.mistral.ai/v1/chat/completions", "mistral-large-latest", "Mistral"),
    ("https://api.groq.com/openai/v1/chat/completions", "openai/gpt-oss-20b", "Groq"),
    ("https://api.x.ai/v1/chat/completions", "grok-4", "xAI"),
    ("https://generativelanguage.googleapis.com/v1beta/models/gemini-2.5-flash:generateContent", None, "Gemini"),
    ("https://openrouter.ai/api/v1/responses", "openai/gpt-5", "OpenAI-compatible"),
    ("", "deepseek-chat", "DeepSeek"), ("", "mistral-small", "Mistral"), ("", "gpt-4o", "OpenAI"),
])
def test_the_rule_follows_the_endpoint_then_the_model(endpoint, model, expected):
    assert rule_for(Round([], format=doctor.CHAT, model=model, endpoint=endpoint)).name == expected


def test_each_provider_has_its_own_minimum_and_step():
    rules = BILLING_RULES
    assert (rules["OpenAI"].minimum, rules["OpenAI"].step) == (1024, 128)
    assert rules["OpenAI"].cached(1000, 1500) == 0 and rules["OpenAI"].cached(1300, 1500) == 1280
    anthropic = rules["Anthropic"]
    assert [anthropic.minimum_for(m) for m in ("claude-opus-5", "claude-sonnet-4-5-20250929", "claude-opus-4-7",
                                               "claude-opus-4-6", "claude-haiku-4-5-20251001", "claude-3-5-haiku")] \
        == [512, 1024, 2048, 4096, 4096, 2048]
    gemini = rules["Gemini"]
    assert [gemini.minimum_for(m) for m in ("gemini-2.5-flash", "gemini-2.5-pro", "gemini-3.5-flash")] \
        == [2048, 2048, 4096]
    for name in ("Mistral", "Groq", "xAI", "OpenAI-compatible", "DeepSeek"):  # none published: none assumed
        assert rules[name].minimum == 0 and rules[name].cached(224, 268) == 224, name


def test_a_provider_is_not_judged_by_openais_minimum():
    """A Mistral round that shares 300 tokens: Mistral bills them cached, OpenAI's rule would not."""
    system = {"role": "system", "content": "You answer questions about the weather in one short sentence. " * 20}
    body = {"model": "mistral-small-latest", "messages": [system, {"role": "user", "content": "Paris?"}]}
    grown = {**body, "messages": body["messages"] + [{"role": "assistant", "content": "Sunny."},
                                                      {"role": "user", "content": "And Lyon?"}]}
    usage = {"usage": {"prompt_tokens": 300, "num_cached_tokens": 0}}
    hit = {"usage": {"prompt_tokens": 310, "num_cached_tokens": 288}}
    lines = [{"request": b, "response": r, "endpoint": "https://api.mistral.ai/v1/chat/completions"}
             for b, r in ((body, usage), (grown, hit))]
    finding = analyse(*lines).findings[1]
    assert (finding.provider, finding.verdict) == ("Mistral", doctor.AGREE) and finding.predicted_cached_tokens > 250
    as_openai = analyse(*[{**line, "endpoint": "https://api.openai.com/v1/chat/completions"} for line in lines])
    assert as_openai.findings[1].predicted_cached_tokens == 0


def test_the_estimate_is_scaled_by_the_prompt_tokens_each_round_reports():
    system = {"role": "system", "content": "Stable instructions for the agent. " * 200}
    one = {"model": "gpt-4o", "messages": [system, {"role": "user", "content": "Go."}]}
    two = {**one, "messages": one["messages"] + [{"role": "assistant", "content": "Done."},
                                                 {"role": "user", "content": "Again."}]}
    estimate = analyse(one, two).findings[1].prompt_tokens
    reported = int(estimate * 1.3)  # an image or a file the body shows only as its digest
    def usage(prompt: int, cached: int) -> dict:
        return {"usage": {"prompt_tokens": prompt, "prompt_tokens_details": {"cached_tokens": cached}}}

    lines = [{"request": one, "response": usage(reported - 20, 0)},
             {"request": two, "response": usage(reported, reported - 128)}]
    finding = analyse(*lines).findings[1]
    assert finding.verdict == doctor.AGREE and finding.predicted_cached_tokens > estimate
    lines[1]["response"]["usage"]["prompt_tokens"] = 3 * estimate  # web search results counted server-side
    finding = analyse(*lines).findings[1]
    assert finding.verdict == doctor.UNSEEN_TOKENS and finding.unseen_tokens > estimate


def anthropic_thinking_log(model: str) -> list[dict]:
    system = "You plan trips. " * 300
    user = {"role": "user", "content": "Plan a day in Hangzhou."}
    answer = {"role": "assistant", "content": [{"type": "thinking", "thinking": "A lake walk, then tea.",
                                                "signature": "c2ln"}, {"type": "text", "text": "West Lake, then tea."}]}
    bare = {"role": "assistant", "content": [{"type": "text", "text": "West Lake, then tea."}]}
    more, again = {"role": "user", "content": "And the evening?"}, {"role": "user", "content": "And dinner?"}
    body = {"model": model, "max_tokens": 512, "system": system}
    return [{**body, "messages": [user]}, {**body, "messages": [user, answer, more]},
            {**body, "messages": [user, bare, more, {"role": "assistant", "content": "A show."}, again]}]


@pytest.mark.parametrize("model,breaks", [("claude-sonnet-4-20250514", False), ("claude-3-7-sonnet-20250219", False),
                                          ("claude-opus-4-5-20251101", True), ("claude-opus-5", True)])
def test_dropping_earlier_thinking_breaks_only_where_the_model_keeps_it(model, breaks):
    finding = analyse(*anthropic_thinking_log(model)).findings[2]
    assert finding.breaks_cache is breaks
    assert finding.cause == (doctor.THINKING_STRIPPED if breaks else doctor.THINKING_DROPPED_BY_PROVIDER)
    assert RULES["rule"][1]["name"] == "Anthropic" and "extended-thinking" in RULES_FILE.read_text()


def test_deepseek_drops_earlier_reasoning_itself():
    system = {"role": "system", "content": "You are a maths tutor. " * 50}
    ask = {"role": "user", "content": "2 + 2?"}
    kept = {"role": "assistant", "content": "4", "reasoning_content": "Two and two make four."}
    lines = [{"model": "deepseek-reasoner", "messages": [system, ask]},
             {"model": "deepseek-reasoner", "messages": [system, ask, kept, {"role": "user", "content": "3 + 3?"}]},
             {"model": "deepseek-reasoner", "messages": [system, ask, {"role": "assistant", "content": "4"},
                                                         {"role": "user", "content": "3 + 3?"},
                                                         {"role": "assistant", "content": "6"},
                                                         {"role": "user", "content": "4 + 4?"}]}]
    finding = analyse(*lines).findings[2]
    assert (finding.breaks_cache, finding.cause) == (False, doctor.THINKING_DROPPED_BY_PROVIDER)


def test_the_audit_does_not_flag_its_own_stand_ins():
    """An image (its stand-in is a digest of its bytes) and a file by its stable id sit before a breakpoint:
    neither is a changing id."""
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo" * 40}}
    document = {"type": "document", "source": {"type": "file", "file_id": "file_011CNha8iCJcU1wXNR6q4V8w"}}
    question = {"type": "text", "text": "Describe both.", "cache_control": {"type": "ephemeral"}}
    body = {"model": "claude-sonnet-4-5", "max_tokens": 256, "system": "You describe images. " * 300,
            "messages": [{"role": "user", "content": [image, document, question]}]}
    items = doctor.audit(analyse(body, body))
    assert items and all("dynamic_before" not in item.issues for item in items)
    stamped = {**body, "system": "Request 7f3a9c2e-1b4d-4e8f-9a6b-2c5d8e1f0a3b. " + body["system"]}
    assert any("dynamic_before" in item.issues for item in doctor.audit(analyse(stamped))), "a real id still is"


def test_lifetimes_per_provider():
    assert BILLING_RULES["Anthropic"].lifetime("5m") == 300 and BILLING_RULES["Anthropic"].lifetime("1h") == 3600
    assert BILLING_RULES["OpenAI"].lifetime() == 300 and BILLING_RULES["OpenAI"].lifetime("24h") == 86400
    assert BILLING_RULES["Groq"].lifetime() == 7200 and BILLING_RULES["Mistral"].lifetime() is None
