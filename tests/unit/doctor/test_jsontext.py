"""The bounded decoder of JSON held in strings: whole JSON decoded, anything else a sentence, never a traceback."""

from __future__ import annotations

import pytest

from core.doctor import jsontext


def test_json_in_a_string_is_decoded_and_text_stays_text():
    assert jsontext.decoded('[{"role": "user", "content": "Hi"}]', "input") == [{"role": "user", "content": "Hi"}]
    assert jsontext.decoded("user: Hi", "input") == "user: Hi"
    assert jsontext.decoded(7, "input") == 7


def test_a_cut_string_is_named_with_its_length_and_end():
    with pytest.raises(jsontext.NotJson, match=r"input is not whole JSON \(14 characters"):
        jsontext.loads('[{"role": "use', "input")
    assert jsontext.lenient('{"a": ', "metadata") == ('{"a": ', 'metadata is not whole JSON (6 characters, '
                                                                 "Expecting value at character 7; it ends '{\"a\": ')")


def test_depth_and_size_are_bounded():
    deep = "[" * 50_000 + "]" * 50_000
    with pytest.raises(jsontext.NotJson, match="nests deeper than 200 levels"):
        jsontext.loads(deep, "gen_ai.input.messages")
    brackets_in_strings = '["' + "[" * 5_000 + '"]'  # brackets inside a string are text, not depth
    assert jsontext.depth(brackets_in_strings) == 1
    assert jsontext.loads(brackets_in_strings, "x") == ["[" * 5_000]
    with pytest.raises(jsontext.NotJson, match="over the"):
        jsontext.loads("[" + " " * jsontext.MAX_CHARS + "]", "input")


def test_a_string_encoded_twice_is_decoded_twice():
    twice = '"{\\"messages\\": [{\\"role\\": \\"user\\"}]}"'
    assert jsontext.decoded(twice, "input") == {"messages": [{"role": "user"}]}
    assert jsontext.decoded('"quoted" text"', "input") == '"quoted" text"'
