"""`core.doctor.decision`: one call on what the doctor compares, followed by the page (AppTest) and the CLI
alike: a single round gets no verdict, a single text file is a system prompt simulated under experiment 3's
strategies."""

from __future__ import annotations

from pathlib import Path

import pytest

from core import doctor
from core.cli.main import main
from tests.support.apptest import ROOT, api_state, app

FIXTURES = ROOT / "tests" / "data" / "doctor"
ONE_ROUND = (FIXTURES / "timestamp.jsonl").read_text().splitlines()[0].encode() + b"\n"
PROMPT = b"You are a travel agent for Hangzhou. Plan relaxed one-day trips.\n"


def test_the_decision_for_each_kind_of_input() -> None:
    log = doctor.comparison(doctor.load_inputs([("a.jsonl", (FIXTURES / "timestamp.jsonl").read_bytes())]), "a.jsonl")
    assert log.kind == doctor.COMPARE and list(log.transcripts) == [doctor.OWN]
    single = doctor.comparison(doctor.load_inputs([("one.jsonl", ONE_ROUND)]), "one.jsonl")
    assert single.kind == doctor.SINGLE_ROUND and not single.transcripts
    assert "only one round in one.jsonl" in single.message
    prompt = doctor.comparison(doctor.load_inputs([("prompt.txt", PROMPT)]), "prompt.txt")
    assert prompt.kind == doctor.SIMULATE and list(prompt.transcripts) == list(doctor.SIMULATED_STRATEGIES)
    assert all(len(t.rounds) > 1 for t in prompt.transcripts.values())
    unread = doctor.comparison(doctor.load_inputs([("u.jsonl", b'{"prompt": "x"}\n')]), "u.jsonl")
    assert unread.kind == doctor.UNREAD


def test_the_page_gives_a_single_round_no_all_clear(fake_api) -> None:
    at = app(**api_state(fake_api))
    at.switch_page("app_pages/cache_doctor.py").run()
    at.file_uploader(key="doctor_files").upload("one.jsonl", ONE_ROUND, "application/json").run()
    assert not at.exception
    assert not any("No round breaks the cache" in s.value for s in at.success) and not at.success
    assert at.error[0].value.startswith("Only one round could be read from one.jsonl")
    assert not at.dataframe


def test_the_page_and_the_cli_both_simulate_a_single_text_file(fake_api, tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    at = app(**api_state(fake_api))
    at.switch_page("app_pages/cache_doctor.py").run()
    at.file_uploader(key="doctor_files").upload("prompt.txt", PROMPT, "text/plain").run()
    assert not at.exception and [tab.label for tab in at.tabs] == ["append only", "timestamp first"]
    path = tmp_path / "prompt.txt"
    path.write_bytes(PROMPT)
    assert main(["doctor", str(path)]) == 0
    out = capsys.readouterr().out
    assert f"{path} (simulated: append_only)" in out and f"{path} (simulated: timestamp_first)" in out
    assert "The cache first breaks in round 2: timestamp" in out  # timestamp first, as experiment 3 shows
    assert main(["doctor", "--fail-on-break", str(path)]) == 2  # not rounds of the user's: nothing to gate
    assert "only one round of yours" in capsys.readouterr().err


def test_the_cli_refuses_a_single_round(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "one.jsonl"
    path.write_bytes(ONE_ROUND)
    assert main(["doctor", str(path)]) == 2
    captured = capsys.readouterr()
    assert f"only one round in {path}" in captured.err and "No round breaks" not in captured.out
