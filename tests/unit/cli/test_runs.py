"""`python -m core runs ...` and `report`, and the experiment commands saving their runs, against the fake API."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import psycopg
import pytest

from core.experiments.output_length import ID as OUTPUT
from core.experiments.samples import EMBEDDED_DEFAULT
from core.runs.runner import DONE, FAILED, STOPPED
from core.store import REFERENCE_ID, RunStore, open_store
from tests.support.apptest import ROOT
from tests.support.fake_openai import FakeOpenAIServer
from tests.unit.store.test_store import WRITER

KEY = "sk-cli-test-secret-9876"


def core(db: Path | str, *args: str, key: str | None = None, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PREFILL_LAB_DB": str(db), **({"MY_KEY": key} if key else {})}
    return subprocess.run([sys.executable, "-m", "core", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout, env=env)


def experiment(fake_api: FakeOpenAIServer, model: str = "ok", lengths: str = "4,8") -> list[str]:
    return ["--backend", "api", "--url", fake_api.base_url, "--model", model, "--key-env", "MY_KEY",
            "--only", "output", "--lengths", lengths]


def stored(db: Path) -> RunStore:
    return open_store(str(db))


@pytest.mark.slow
def test_an_experiment_command_saves_its_rounds(fake_api: FakeOpenAIServer, tmp_path: Path) -> None:
    db = tmp_path / "runs.sqlite"
    proc = core(db, *experiment(fake_api), key=KEY)
    assert proc.returncode == 0, proc.stderr
    (saved,) = [r for r in stored(db).runs() if r.id != REFERENCE_ID]
    assert saved.experiment == OUTPUT and saved.status == DONE and saved.rounds == 2 and saved.backend == "api"
    assert [r.target_tokens for r in stored(db).records(saved.id)] == [4, 8]  # type: ignore[attr-defined]
    listing = core(db, "runs", "list")
    assert saved.id in listing.stdout and " output " in listing.stdout and "done" in listing.stdout


@pytest.mark.slow
def test_no_save_saves_nothing(fake_api: FakeOpenAIServer, tmp_path: Path) -> None:
    db = tmp_path / "runs.sqlite"
    assert core(db, *experiment(fake_api), "--no-save").returncode == 0
    assert [r.id for r in stored(db).runs()] == [REFERENCE_ID]


@pytest.mark.slow
def test_a_key_echoed_by_the_api_never_reaches_the_store(fake_api: FakeOpenAIServer, tmp_path: Path) -> None:
    db = tmp_path / "runs.sqlite"
    proc = core(db, *experiment(fake_api, model="echo-key"), key=KEY)
    assert proc.returncode == 1
    (saved,) = [r for r in stored(db).runs() if r.id != REFERENCE_ID]
    assert saved.status == FAILED and saved.rounds == 1 and stored(db).records(saved.id)[0].error
    for path in tmp_path.iterdir():
        assert KEY.encode() not in path.read_bytes(), path
    for action in ("show", "export"):
        assert KEY not in core(db, "runs", action, saved.id).stdout


@pytest.mark.slow
def test_ctrl_c_keeps_the_rounds_and_marks_the_run_stopped(tmp_path: Path) -> None:
    db = tmp_path / "runs.sqlite"
    with FakeOpenAIServer(token_delay=0.05) as slow:  # 0.05 s a token: the 64-token round takes 3 s
        env = {**os.environ, "PREFILL_LAB_DB": str(db)}
        # Ctrl-C as a terminal sends it (tests/conftest.py gives the child the default SIGINT whatever started us)
        proc = subprocess.Popen([sys.executable, "-m", "core", *experiment(slow, lengths="2,64,64")], cwd=ROOT,
                                env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert proc.stdout is not None
        proc.stdout.readline()  # the header
        proc.stdout.readline()  # round 1
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=60)
    (saved,) = [r for r in stored(db).runs() if r.id != REFERENCE_ID]
    assert saved.status == STOPPED and saved.rounds == 1


@pytest.mark.slow
def test_export_import_show_rename_delete(tmp_path: Path) -> None:
    mine, friends = tmp_path / "mine.sqlite", tmp_path / "friend.sqlite"
    imported = core(mine, "runs", "import", str(EMBEDDED_DEFAULT))
    assert imported.returncode == 0, imported.stderr
    ids = imported.stdout.split(": ", 1)[1].split(", ")
    assert len(ids) == 3
    exported = tmp_path / "cache.json"
    cache_id = next(i.strip() for i in ids if stored(mine).get(i.strip()).experiment == "cache")  # type: ignore[union-attr]
    assert core(mine, "runs", "export", cache_id[:6], "-o", str(exported)).returncode == 0
    assert json.loads(exported.read_text())["run"]["machine"]
    assert core(friends, "runs", "import", str(exported)).returncode == 0
    (copy,) = [r for r in stored(friends).runs() if r.id != REFERENCE_ID]
    assert copy.rounds == 12 and copy.experiment == "cache"
    assert core(friends, "runs", "rename", copy.id, "the laptop").returncode == 0
    assert stored(friends).get(copy.id).label == "the laptop"  # type: ignore[union-attr]
    shown = core(friends, "runs", "show", copy.id)
    assert "the laptop" in shown.stdout and shown.stdout.count('"experiment": "cache"') == 12
    assert core(friends, "runs", "delete", copy.id, "no-such-run").returncode == 2  # nothing deleted
    assert stored(friends).get(copy.id) is not None
    assert core(friends, "runs", "delete", copy.id).returncode == 0 and stored(friends).get(copy.id) is None


@pytest.mark.slow
def test_import_refuses_with_file_and_line(tmp_path: Path) -> None:
    bad = tmp_path / "findings.json"
    bad.write_text('{\n  "settings": {},\n  "rounds": [\n    {"experiment": "cache", "round": 1, "x": 1}\n]}\n')
    proc = core(tmp_path / "runs.sqlite", "runs", "import", str(bad))
    assert proc.returncode == 2
    assert f"{bad}, line 4 (round 1): unknown field 'x'" in proc.stderr


@pytest.mark.slow
def test_report_command_writes_one_html_file(tmp_path: Path) -> None:
    db = tmp_path / "runs.sqlite"
    ids = core(db, "runs", "import", str(EMBEDDED_DEFAULT)).stdout.split(": ", 1)[1].strip().split(", ")
    out = tmp_path / "report.html"
    proc = core(db, "report", *ids, REFERENCE_ID, "--html", str(out), "--lang", "zh")
    assert proc.returncode == 0, proc.stderr
    text = out.read_text()
    assert text.startswith("<!DOCTYPE html>") and "Prefill Lab 报告" in text and text.count("class='chart'") == 5
    assert core(db, "report", "nope", "--html", str(out)).returncode == 2


@pytest.mark.slow
def test_two_app_writers_and_a_cli_run_at_once(fake_api: FakeOpenAIServer, tmp_path: Path) -> None:
    """What the app does per round (`RunStore.add`) from two processes, while the CLI saves its run."""
    db = tmp_path / "runs.sqlite"
    open_store(str(db)).close()
    env = {**os.environ, "PREFILL_LAB_DB": str(db)}
    writers = [subprocess.Popen([sys.executable, "-c", WRITER, str(db), f"app{i}", "400"], cwd=ROOT,
                                stdout=subprocess.PIPE, text=True) for i in range(2)]
    cli = subprocess.Popen([sys.executable, "-m", "core", *experiment(fake_api, lengths="2,3,4,5,6,7,8,9")], cwd=ROOT,
                           env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    started = time.monotonic()
    outputs = [w.communicate(timeout=120)[0].split() for w in writers]
    cli_out, cli_err = cli.communicate(timeout=120)
    assert cli.returncode == 0, cli_err
    assert all(problem == "ok" for _, problem in outputs) and "warning" not in cli_err
    store = stored(db)
    for i, (run_id, _) in enumerate(outputs):
        records = store.records(run_id)
        assert [r.round for r in records] == list(range(1, 401))  # type: ignore[attr-defined]
        assert {r.strategy for r in records} == {f"app{i}"}  # type: ignore[attr-defined]
    (cli_run,) = [r for r in store.runs(OUTPUT)]
    assert [r.target_tokens for r in store.records(cli_run.id)] == list(range(2, 10))  # type: ignore[attr-defined]
    assert time.monotonic() - started < 120


def test_a_password_with_an_at_sign_shows_no_part_of_it_on_the_cli() -> None:
    proc = core("postgresql://prefill:Pa@ss-Odd77@127.0.0.1:1/x", "runs", "list")
    assert "ss-Odd77" not in proc.stderr + proc.stdout and "%40" in proc.stderr and "Traceback" not in proc.stderr


def test_a_malformed_url_on_the_cli_is_a_sentence() -> None:
    proc = core("postgresql://u:pw-leak-999@[::1x]:5432/x", "runs", "list")
    assert "Traceback" not in proc.stderr and "is not a valid URL" in proc.stderr and "pw-leak-999" not in proc.stderr


@pytest.mark.slow
def test_a_run_into_a_store_it_cannot_use_exits_non_zero_saying_nothing_was_kept(
        fake_api: FakeOpenAIServer, tmp_path: Path, postgres_url: str) -> None:
    with psycopg.connect(postgres_url, autocommit=True) as conn:  # another program's schema_version
        conn.execute("CREATE TABLE schema_version (v INTEGER)")
    other = tmp_path / "other.sqlite"
    sqlite3.connect(other).executescript("CREATE TABLE accounts (name TEXT);")
    for location in (postgres_url, other):
        proc = core(location, *experiment(fake_api), key=KEY)
        assert proc.returncode == 1, proc.stderr
        assert "nothing measured here was kept" in proc.stderr and "Every round is in the table above" in proc.stderr


def test_runs_list_into_a_closed_pipe_ends_without_a_traceback(tmp_path: Path) -> None:
    """`runs list | head`: the reader goes away before the listing is written."""
    env = {**os.environ, "PREFILL_LAB_DB": str(tmp_path / "runs.sqlite")}
    proc = subprocess.Popen([sys.executable, "-m", "core", "runs", "list"], cwd=ROOT, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()  # before the child wrote anything: its first flush meets a closed pipe
    err = proc.stderr.read()
    proc.wait(120)
    assert "Traceback" not in err and "BrokenPipeError" not in err and proc.returncode == 1
