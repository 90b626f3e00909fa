"""The words layer: every key in both languages with the same placeholders, every sentence core/ says by key
(`core.words.Sentence`: the doctor's provider rules and trace notes) present in both, and said in Chinese
on a page in Chinese while the CLI keeps its English."""

from __future__ import annotations

import pickle
import re
import string
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from core import doctor, words
from core.doctor.rules import BILLING_RULES, RULES_FILE
from core.words import LANGUAGES, ContentWords, Sentence, in_words, load
from tests.support import ROOT

TRACES = Path(__file__).resolve().parents[1] / "data" / "doctor" / "traces"
SAID_BY_KEY = re.compile(r"""Sentence\(\s*f?["']([a-z_.{}]+)["']""")
COUNTED_KEY = re.compile(r"""counted\(\s*["']([a-z_.]+)["']""")
CJK = re.compile(r"[\u4e00-\u9fff]")


def leaves(node: Any, prefix: str = "") -> Iterator[tuple[str, str]]:
    for name, value in node.items():
        if isinstance(value, dict):
            yield from leaves(value, f"{prefix}{name}.")
        elif isinstance(value, str):
            yield f"{prefix}{name}", value


def placeholders(text: str) -> set[str]:
    return {field for _, field, _, _ in string.Formatter().parse(text) if field is not None}


def test_every_key_is_in_both_languages_with_the_same_placeholders() -> None:
    """The hosted demo's refusals are the one section only zh.toml has: their English is in the code beside
    each rule (core.hosting.Refused)."""
    en, zh = dict(leaves(load("en"))), dict(leaves(load("zh")))
    assert en.keys() <= zh.keys(), sorted(en.keys() - zh.keys())
    assert all(key.startswith("refused.") for key in zh.keys() - en.keys()), sorted(zh.keys() - en.keys())
    assert [key for key in en if placeholders(en[key]) != placeholders(zh[key])] == []


@pytest.mark.parametrize("section", ["doctor_rules", "doctor_notes"])
def test_the_doctors_rules_and_notes_are_said_in_chinese(section: str) -> None:
    chinese = dict(leaves(load("zh")[section]))
    assert chinese and [key for key, text in chinese.items() if not CJK.search(text)
                        and not key.startswith("unit.")] == []  # "LLM span", "generation": the tools' own names


def test_every_key_core_says_a_sentence_by_is_in_both_languages() -> None:
    said = {key for path in (ROOT / "core").rglob("*.py") for key in SAID_BY_KEY.findall(path.read_text())}
    assert {"doctor_notes.merged", "doctor_notes.read_trace", "doctor_notes.unit.llm_runs"} <= said
    for key in said - {"doctor_rules.{key}"}:
        for lang in LANGUAGES:
            assert isinstance(ContentWords(lang).raw(key), str), (lang, key)


def test_every_count_core_says_has_its_singular_and_english_uses_it() -> None:
    """`core.words.counted`: "1 trace", "2 traces"; a unit ("LLM spans") agrees with its count too."""
    counted = {key for path in (ROOT / "core").rglob("*.py") for key in COUNTED_KEY.findall(path.read_text())}
    assert {"doctor_notes.traces", "doctor_notes.in_sessions"} <= counted
    units = {f"doctor_notes.unit.{key}" for key in load("en")["doctor_notes"]["unit"] if not key.endswith("_one")}
    for key in counted | units:
        for lang in LANGUAGES:
            assert isinstance(ContentWords(lang).raw(key), str) and isinstance(ContentWords(lang).raw(f"{key}_one"),
                                                                               str), (lang, key)
    assert [words.counted("doctor_notes.traces", n) for n in (0, 1, 2)] == ["0 traces", "1 trace", "2 traces"]
    assert words.counted("doctor_notes.unit.llm_spans", 1) == "LLM span"
    assert in_words(words.counted("doctor_notes.traces", 1), ContentWords("zh")) == "1 条轨迹"
    assert {"doctor_notes.gaps", "doctor_notes.tools_unseen"} <= counted  # "1 of 1 spans do not hold" was said


def test_a_count_of_one_round_agrees_in_verb_and_noun() -> None:
    from core.doctor.model import Round
    from core.doctor.traces import SPANS, gaps_note
    one, two = Round([], gap="cut"), Round([])
    assert gaps_note([one], SPANS) == ["1 of 1 span does not hold its whole prompt: that round gets no verdict"]
    assert gaps_note([one, two], SPANS) == ["1 of 2 spans does not hold its whole prompt: that round gets no verdict"]
    assert gaps_note([two], SPANS) == []


def test_every_shipped_rule_is_described_in_both_languages() -> None:
    assert "\nnote = " not in RULES_FILE.read_text().split("[diagnostics")[0]  # the words live in content/
    for rule in BILLING_RULES.values():
        described = rule.described()
        assert isinstance(described, Sentence) and described == ContentWords("en")(described.key), rule.name
        assert CJK.search(in_words(described, ContentWords("zh"))), rule.name
    assert BILLING_RULES["OpenAI"].edited(name="My gateway", note="Mine.").described() == "Mine."


def test_a_real_trace_is_noted_in_english_for_the_cli_and_in_chinese_for_a_page() -> None:
    """Two instrumentations of one SDK call (tests/data/doctor/traces/sdk, as the OpenTelemetry SDK wrote it)."""
    transcript = doctor.load_paths([TRACES / "sdk" / "console_two_instrumentations.json"])
    assert "8 LLM spans as 4 calls" in transcript.notes[0]  # the CLI's words, unchanged
    zh = ContentWords("zh")
    chinese = [in_words(note, zh) for note in transcript.notes]
    assert all(isinstance(note, Sentence) for note in transcript.notes)
    assert "8 个LLM span，合为 4 次调用" in chinese[0], chinese[0]
    assert all(CJK.search(text) for text in chinese), chinese
    assert [pickle.loads(pickle.dumps(note)) for note in transcript.notes] == transcript.notes  # a page's cache


def test_an_export_of_another_tool_is_noted_in_chinese() -> None:
    transcript = doctor.load_paths([TRACES / "langsmith" / "wrap_openai_o1_mini_runs.json"])
    assert "LLM runs" in transcript.notes[0], transcript.notes[0]
    assert "LLM 运行记录" in in_words(transcript.notes[0], ContentWords("zh"))
