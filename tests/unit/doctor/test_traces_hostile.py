"""Hostile attributes in an OTLP trace (core/doctor/traces.py): an attribute of a shape no convention gives it
is named with its span, never a traceback; a cached count above the input count says so."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from core import doctor

TRACES = Path(__file__).resolve().parents[2] / "data" / "doctor" / "traces"
DEEP = "[" * 50_001 + "]" * 50_001  # not 100,000 characters, an exporter's cut


def with_attribute(key: str, value: dict[str, Any]) -> doctor.Transcript:
    """The OpenLLMetry capture (GenAI conventions) with one attribute replaced or added, read as an upload is."""
    document = json.loads((TRACES / "interlingua_openllmetry.json").read_text())
    span = document["resourceSpans"][0]["scopeSpans"][0]["spans"][0]
    span["attributes"] = [a for a in span["attributes"] if a["key"] != key] + [{"key": key, "value": value}]
    return doctor.load_inputs([("trace.json", json.dumps(document).encode())])


@pytest.mark.parametrize("key,value", [
    ("gen_ai.input.messages", {"intValue": "7"}),
    ("gen_ai.input.messages", {"stringValue": DEEP}),
    ("gen_ai.input.messages", {"stringValue": '[7, "text"]'}),
    ("gen_ai.input.messages", {"stringValue": '[{"role": "user", "parts": "text"}]'}),
    ("gen_ai.system_instructions", {"kvlistValue": {"values": [{"key": "a", "value": {"intValue": "1"}}]}}),
    ("gen_ai.tool.definitions", {"stringValue": DEEP}),
    ("gen_ai.request.model", {"kvlistValue": {"values": [{"key": "name", "value": {"stringValue": "m"}}]}}),
])
def test_a_prompt_attribute_of_the_wrong_shape_is_a_named_gap(key: str, value: dict[str, Any]) -> None:
    transcript = with_attribute(key, value)
    (round_,) = transcript.rounds
    named = [round_.gap or "", *transcript.errors, *transcript.unused]
    assert any(key in text for text in named), named
    assert " span " in round_.source


@pytest.mark.parametrize("key,value", [
    ("gen_ai.usage.input_tokens", {"stringValue": "lots"}),
    ("gen_ai.usage.input_tokens", {"intValue": "lots"}),
    ("gen_ai.usage.cache_read.input_tokens", {"arrayValue": {"values": [{"intValue": "256"}]}}),
    ("gen_ai.usage.cache_read.input_tokens", {"intValue": "500"}),  # above the 412 input tokens
])
def test_an_unusable_count_is_named_with_its_span(key: str, value: dict[str, Any]) -> None:
    transcript = with_attribute(key, value)
    (round_,) = transcript.rounds
    assert round_.gap is None and round_.chat  # the prompt is read
    (error,) = transcript.unused  # the round was read: this figure alone is left out
    assert not transcript.errors and " span " in error and key.rsplit(".", 1)[0] in error, error
    if "500" in json.dumps(value):
        assert "500 cached tokens is more than the 412" in error and round_.measured is None
