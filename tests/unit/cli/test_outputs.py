"""``--json``, ``--csv``, ``--html``, ``--write-fixed`` and ``-o`` to a file that cannot be written: a sentence and
exit 2 before the work (it was a traceback after it: the measured rounds never reached the file)."""

from __future__ import annotations

from pathlib import Path

import pytest

from core.cli.main import main
from tests.support.fake_openai import FakeOpenAIServer

TIMESTAMP = Path(__file__).resolve().parents[2] / "data" / "doctor" / "timestamp.jsonl"


@pytest.mark.parametrize(("flag", "where", "says"), [
    ("--json", "missing/out.json", "the folder does not exist"),
    ("--csv", ".", "it is a folder"),
    ("--json", "/sys/kernel/out.json", "Permission denied"),
])
def test_an_experiment_s_unwritable_output_is_refused_before_any_request(
        fake_api: FakeOpenAIServer, tmp_path: Path, capsys: pytest.CaptureFixture[str], flag: str, where: str,
        says: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PREFILL_LAB_DB", ":memory:")
    code = main(["--backend", "api", "--url", fake_api.base_url, "--model", "ok", "--only", "output",
                 "--lengths", "4", flag, where])
    err = capsys.readouterr().err
    assert code == 2 and f"error: cannot write {where}: " in err and says in err and "Traceback" not in err
    assert fake_api.requests == []  # nothing was measured, so nothing was lost


def test_the_doctor_report_and_export_check_their_files_first(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "no" / "such"
    for argv in (["doctor", str(TIMESTAMP), "--json", str(missing / "f.json")],
                 ["doctor", str(TIMESTAMP), "--write-fixed", str(missing / "fixed.jsonl")],
                 ["report", "chapter-mac-studio", "--html", str(tmp_path)],
                 ["runs", "export", "chapter-mac-studio", "-o", str(missing / "run.json")]):
        assert main(argv) == 2, argv
        assert "error: cannot write " in capsys.readouterr().err
    out = tmp_path / "written.json"
    assert main(["doctor", str(TIMESTAMP), "--json", str(out)]) == 0 and out.stat().st_size > 0
