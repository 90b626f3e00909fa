"""The doctor's fix step on hostile logs: one line nested too deeply (the analysis names it; the fix keeps it
as it is), a whole log too deep to fix (a sentence), and a log with nothing to fix (not parsed again)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from core import doctor
from core.cli.main import main
from core.doctor import fix
from core.words import ContentWords, in_words, said

FIXTURES = Path(__file__).resolve().parents[2] / "data" / "doctor"
NESTED = '{"request": {"messages": [{"role": "user", "content": ' + "[" * 100_000 + "]" * 100_000 + "}]}}"


def _with_nested_line(path: Path) -> Path:
    lines = (FIXTURES / "timestamp.jsonl").read_text().splitlines()  # round 3 breaks the cache: a timestamp
    path.write_text("\n".join([lines[0], NESTED, *lines[1:]]) + "\n")
    return path


def test_a_nested_line_is_kept_as_it_is_and_the_rest_is_fixed(tmp_path: Path) -> None:
    text = _with_nested_line(tmp_path / "agent.jsonl").read_text()
    fixed = fix.fix_log("agent.jsonl", text)
    assert fixed.fixed == [doctor.TIMESTAMP] and fixed.after is not None and fixed.after.first_break is None
    assert fixed.text.splitlines()[1] == NESTED


def test_write_fixed_with_a_nested_line_writes_the_fix_and_no_traceback(tmp_path: Path,
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    log, out = _with_nested_line(tmp_path / "agent.jsonl"), tmp_path / "fixed.jsonl"
    assert main(["doctor", str(log), "--write-fixed", str(out)]) == 0
    printed, err = capsys.readouterr()
    assert "Traceback" not in err and "agent.jsonl line 2: nested too deeply to read" in err
    assert "fix: the fixed log has no cache break." in printed
    assert out.read_text().splitlines()[1] == NESTED and len(out.read_text().splitlines()) == 5


def test_a_json_log_too_deep_to_fix_is_a_sentence() -> None:
    rounds = [json.loads(line) for line in (FIXTURES / "timestamp.jsonl").read_text().splitlines()]
    text = json.dumps(rounds)
    transcript = doctor.load_inputs([("agent.json", text.encode())])
    deep = text[:-1] + ", " + "[" * 100_000 + "]" * 100_000 + "]"  # one more item, nested too deeply
    with pytest.raises(doctor.TranscriptError, match="agent.json: nested too deeply to fix"):
        fix.fix_log("agent.json", deep, transcript=transcript)


def test_a_log_with_nothing_to_fix_is_not_parsed_again(monkeypatch: pytest.MonkeyPatch) -> None:
    text = (FIXTURES / "history_edited.jsonl").read_text()
    transcript = doctor.load_inputs([("agent.jsonl", text.encode())])
    analysis = doctor.analyse(transcript)
    assert not fix.fixable(analysis)

    def parsed(*args: object) -> None:
        raise AssertionError("the log was parsed again")

    monkeypatch.setattr(fix, "_parse", parsed)
    monkeypatch.setattr(fix, "_read", parsed)
    monkeypatch.setattr(fix, "analyse", parsed)
    fixed = fix.fix_log("agent.jsonl", text, transcript=transcript, analysis=analysis)
    assert fixed.fixed == [] and fixed.left == [doctor.HISTORY_EDITED] and fixed.text is text


def test_a_log_that_cannot_be_fixed_is_refused_in_the_readers_language() -> None:
    """The CLI prints the English; the page says the same refusal from ``[doctor_fix_refused]`` in Chinese."""
    with pytest.raises(doctor.TranscriptError) as refused:
        fix.fix_log("notes.txt", "plain words, one prompt")
    assert str(refused.value) == "notes.txt: only a JSON or JSONL log of request bodies can be fixed."
    zh = in_words(said(refused.value), ContentWords("zh"))
    assert zh == "notes.txt：只有由请求体组成的 JSON 或 JSONL 日志才能修复。"
