"""A cached count the provider sent but that is not a count ("1152", [1152]) is unknown, never 0: the line is
named, and no round is called a provider miss from it (it was `0/1152 provider_missed`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from core.cli.main import main
from core.doctor.inputs import measured

CLEAN = Path(__file__).resolve().parents[2] / "data" / "doctor" / "clean.jsonl"  # 4 append-only rounds
LONG = "Answer as a patient travel agent would; keep every plan relaxed. " * 120  # about 1,900 tokens: cacheable


def _log(path: Path, cached: Any) -> Path:
    lines = []
    for number, line in enumerate(CLEAN.read_text().splitlines()):
        body = json.loads(line)
        body["messages"][0]["content"] += LONG
        usage = {"prompt_tokens": 2100 + 30 * number, "prompt_tokens_details": {"cached_tokens": cached if number
                                                                                else 0}}
        lines.append(json.dumps({"request": body, "response": {"status": 200, "usage": usage}}))
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.mark.parametrize("cached", ["1152", [1152], None])
def test_an_unreadable_cached_count_is_unknown_not_a_provider_miss(tmp_path: Path, cached: Any,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    log, out_json = _log(tmp_path / "agent.jsonl", cached), tmp_path / "out.json"
    assert main(["doctor", str(log), "--json", str(out_json)]) == 0
    out, err = capsys.readouterr()
    rounds = json.loads(out_json.read_text())["rounds"]
    assert rounds[1]["predicted_cached_tokens"] > 1024  # the prefix was intact: a miss would have been called
    if cached is None:  # the details hold no count: nothing was cached, as OpenAI writes it
        assert [r["measured_cached_tokens"] for r in rounds[1:]] == [0, 0, 0]
        return
    assert f"agent.jsonl line 2: response.usage.prompt_tokens_details.cached_tokens = {cached!r}" in err
    assert [r["measured_cached_tokens"] for r in rounds[1:]] == [None, None, None]
    assert all(r["verdict"] is None for r in rounds[1:]) and "provider_missed" not in out


def test_measured_reads_an_unreadable_count_as_none_and_a_missing_one_as_zero() -> None:
    usage = {"prompt_tokens": 2000, "prompt_tokens_details": {"cached_tokens": "1152"}}
    assert measured({"usage": usage}) == (None, ["response.usage.prompt_tokens_details.cached_tokens = '1152' "
                                                 "(not a token count)"])
    found, problems = measured({"usage": {"prompt_tokens": 2000, "prompt_tokens_details": {"audio_tokens": 0}}})
    assert found is not None and found.cached_tokens == 0 and not problems


def test_a_round_whose_only_unreadable_part_is_its_cached_count_was_read(tmp_path: Path,
                                                                        capsys: pytest.CaptureFixture[str]) -> None:
    """--fail-on-break gates on rounds that break the cache or lines not read; this log has neither."""
    log = _log(tmp_path / "agent.jsonl", "1152")
    assert main(["doctor", str(log), "--fail-on-break"]) == 0
    out, err = capsys.readouterr()
    assert "not used: agent.jsonl line 2" in err and "could not be read" not in out + err


def test_one_line_not_read_is_said_in_the_singular(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log = _log(tmp_path / "agent.jsonl", 0)
    log.write_text(log.read_text() + "{not json\n")
    assert main(["doctor", str(log)]) == 0
    out, _ = capsys.readouterr()
    assert "1 line could not be read and was not checked" in out and "1 lines" not in out
