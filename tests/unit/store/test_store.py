"""The run store (core/store): rounds written as they come, cut runs, keys kept out, and every fault of its file.

A test taking ``location`` runs on both engines: a SQLite file and a fresh PostgreSQL database."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from core.experiments.batch import ID as BATCH
from core.experiments.input_length import ID as INPUT
from core.experiments.output_length import ID as OUTPUT
from core.experiments.prefix_cache import ID as CACHE
from core.experiments.samples import EMBEDDED_BATCH, EMBEDDED_DEFAULT
from core.records import RoundResult, renamed
from core.report import ContentWords, build_report
from core.runs.runner import DONE, RUNNING, STOPPED
from core.store import (
    CUT,
    IMPORTED,
    REFERENCE,
    REFERENCE_ID,
    ImportRefused,
    RunStore,
    StoreError,
    export_run,
    import_export,
    open_store,
    read_export,
)
from core.store.db import VISITOR_KEEP_S
from core.store.engine import is_url
from core.store.schema import SCHEMA_VERSION
from tests.support import ROOT
from tests.support.stores import contents

KEY = "sk-test-very-secret-4242"


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def rounds(n: int, strategy: str = "append_only") -> list[RoundResult]:
    return [RoundResult(CACHE, i, strategy=strategy, prompt_tokens=1000 + i, ttft_ms=10.0 * i) for i in range(1, n + 1)]


@pytest.fixture
def db(tmp_path: Path) -> Iterator[Path]:
    yield tmp_path / "data" / "runs.sqlite"


def test_a_run_is_written_round_by_round_and_read_back(location: str) -> None:
    store = open_store(location)
    assert store.problem == "" and store.on_disk
    other = open_store(location)  # a second connection (another process would see the same)
    run_id = store.begin(CACHE, {"backend": "api", "model": "m"}, label="first")
    for row in rounds(3):
        store.add(run_id, row)
        assert other.get(run_id).rounds == row.round  # type: ignore[union-attr]  # read at once
    store.finish(run_id, DONE, {"median_ttft_ms": 20.0})
    again = open_store(location)
    saved = again.get(run_id)
    assert saved is not None and saved.status == DONE and saved.rounds == 3
    assert saved.summary == {"median_ttft_ms": 20.0}
    assert saved.machine["cores"] == os.cpu_count() and saved.machine["cpu"]
    assert again.records(run_id) == rounds(3)
    assert again.db.execute("SELECT version FROM schema_version").scalar() == SCHEMA_VERSION
    if not is_url(location):
        assert sqlite3.connect(location).execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_newest_first_filtered_by_experiment_with_reference_run(location: str) -> None:
    store = open_store(location)
    old = store.begin(CACHE, {}, label="old", started_at=time.time() - 60)
    new = store.begin(CACHE, {}, label="new")
    store.begin(INPUT, {}, label="other experiment")
    listed = [r.id for r in store.runs(CACHE)]
    assert listed[:2] == [new, old] and REFERENCE_ID in listed
    reference = store.get(REFERENCE_ID)
    assert reference is not None and reference.source == REFERENCE and reference.rounds == 12
    assert "Mac Studio" in reference.label and "published" in reference.machine["label"]
    assert store.rename(new, "renamed") and store.get(new).label == "renamed"  # type: ignore[union-attr]
    assert store.delete(old) and store.get(old) is None and store.records(old) == []


def test_no_key_reaches_the_store(location: str) -> None:
    store = open_store(location)
    settings = {"backend": "api", "model": "m", "api_key": KEY, "headers": {"authorization": f"Bearer {KEY}"},
                "base_url": f"https://example.test/v1?key={KEY}"}
    run_id = store.begin(OUTPUT, settings, label=f"run with {KEY}", secrets=[KEY])
    store.add(run_id, RoundResult(OUTPUT, 1, error=f"401 Unauthorized: invalid key {KEY}"))
    store.finish(run_id, DONE)
    store.close()
    assert b"401 Unauthorized: invalid key ***" in contents(location) and KEY.encode() not in contents(location)
    saved = RunStore.open(location).get(run_id)
    assert saved is not None and "api_key" not in saved.settings and "***" in saved.settings["base_url"]


@pytest.mark.slow
def test_a_killed_writer_leaves_its_rounds_and_a_cut_run(location: str) -> None:
    script = textwrap.dedent(f"""
        import os, signal
        from core.store import open_store
        from core.records import RoundResult, renamed
        store = open_store({location!r})
        run_id = store.begin("cache", {{}}, label="killed")
        for i in (1, 2):
            store.add(run_id, RoundResult("cache", i, ttft_ms=5.0))
        print(run_id, flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
    """)
    proc = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert proc.returncode == -signal.SIGKILL
    run_id = proc.stdout.strip()
    saved = open_store(location).get(run_id)
    assert saved is not None and saved.status == CUT and saved.rounds == 2 and saved.finished_at is None
    # while its writer lives, the same kind of run is running, not cut
    live = open_store(location)
    assert live.get(live.begin(CACHE, {}, label="live")).status == RUNNING  # type: ignore[union-attr]


def _fallback(location: Path) -> RunStore:
    store = open_store(str(location))
    assert not store.on_disk and store.problem
    run_id = store.begin(CACHE, {}, label="kept in memory")  # the app keeps working
    store.add(run_id, rounds(1)[0])
    assert store.get(run_id).rounds == 1  # type: ignore[union-attr]
    return store


def test_corrupt_file_is_left_untouched_and_runs_go_to_memory(db: Path) -> None:
    db.parent.mkdir(parents=True)
    db.write_bytes(b"SQLite format 3\x00" + os.urandom(4096))
    before = digest(db)
    store = _fallback(db)
    assert "damaged or not a database" in store.problem and str(db) in store.problem
    assert digest(db) == before and sorted(p.name for p in db.parent.iterdir()) == ["runs.sqlite"]


def test_newer_schema_is_left_untouched(db: Path) -> None:
    open_store(str(db)).close()
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE schema_version SET version = ?", (SCHEMA_VERSION + 1,))
    conn.close()
    before = digest(db)
    store = _fallback(db)
    assert f"newer Prefill Lab (store version {SCHEMA_VERSION + 1}" in store.problem
    assert digest(db) == before


def test_another_programs_database_is_not_taken_over(db: Path) -> None:
    db.parent.mkdir(parents=True)
    with sqlite3.connect(db) as conn:
        conn.execute("CREATE TABLE invoices (n INTEGER)")
    conn.close()
    before = digest(db)
    store = _fallback(db)
    assert "not a Prefill Lab run store (tables: invoices)" in store.problem and digest(db) == before


@pytest.mark.slow
def test_locked_by_another_process(db: Path) -> None:
    open_store(str(db)).close()
    holder = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(f"""
            import sqlite3, sys
            conn = sqlite3.connect({str(db)!r}, isolation_level=None)
            conn.execute("PRAGMA locking_mode = EXCLUSIVE")
            conn.execute("BEGIN EXCLUSIVE")
            print("locked", flush=True)
            sys.stdin.read()
        """)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
        before = digest(db)
        started = time.monotonic()
        store = _fallback(db)
        assert "locked by another process" in store.problem
        assert time.monotonic() - started < 10  # the app does not hang on it
        assert digest(db) == before
    finally:
        holder.communicate("", timeout=120)


@pytest.fixture
def read_only_dir(tmp_path: Path) -> Iterator[Path]:
    """A folder on a read-only mount (root: a read-only bind mount; otherwise: no write permission)."""
    source, mount = tmp_path / "source", tmp_path / "ro"
    source.mkdir()
    mount.mkdir()
    open_store(str(source / "runs.sqlite")).close()
    if os.geteuid() == 0:
        bound = subprocess.run(["mount", "--bind", str(source), str(mount)], capture_output=True, text=True)
        if bound.returncode != 0:  # root needs a real read-only mount: permissions do not stop it
            pytest.skip(f"this machine lets root make no read-only mount: {bound.stderr.strip()}")
        try:
            subprocess.run(["mount", "-o", "remount,bind,ro", str(mount)], check=True)
            yield mount
        finally:
            subprocess.run(["umount", str(mount)], check=True)
    else:
        (source / "runs.sqlite").chmod(0o444)
        source.chmod(0o555)
        try:
            yield source
        finally:
            source.chmod(0o755)


def test_read_only_disk(read_only_dir: Path) -> None:
    existing = read_only_dir / "runs.sqlite"
    before = digest(existing)
    store = _fallback(existing)
    assert "read-only disk or not writable" in store.problem and digest(existing) == before
    store = _fallback(read_only_dir / "new" / "runs.sqlite")
    assert "cannot be created" in store.problem


def test_an_empty_file_becomes_a_store(tmp_path: Path) -> None:
    empty = tmp_path / "runs.sqlite"
    empty.touch()  # e.g. made by hand, or a store whose first open was killed before its first commit
    store = RunStore.open(str(empty))
    assert store.get(store.begin(CACHE, {}, label="first")) is not None
    assert sqlite3.connect(empty).execute("SELECT version FROM schema_version").fetchone()[0] == SCHEMA_VERSION


def test_memory_store_writes_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PREFILL_LAB_DB", ":memory:")
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path))
    store = open_store()
    assert not store.on_disk and store.problem == ""
    store.begin(CACHE, {}, label="x")
    assert list(tmp_path.iterdir()) == []


def test_default_location_follows_xdg(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PREFILL_LAB_DB", raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path))
    store = open_store()
    assert store.location == str(tmp_path / "prefill-lab" / "runs.sqlite") and store.on_disk


WRITER = textwrap.dedent("""
    import sys
    from core.store import open_store
    from core.records import RoundResult, renamed
    db, name, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    store = open_store(db)
    run_id = store.begin("cache", {"writer": name}, label=name)
    for i in range(1, n + 1):
        store.add(run_id, RoundResult("cache", i, strategy=name, prompt_tokens=i))
    store.finish(run_id, "done")
    print(run_id, store.problem or "ok", flush=True)
""")


@pytest.mark.slow
def test_processes_writing_at_once_lose_and_mix_nothing(location: str) -> None:
    open_store(location).close()
    n = 300
    writers = [subprocess.Popen([sys.executable, "-c", WRITER, location, f"writer{i}", str(n)], cwd=ROOT,
                                stdout=subprocess.PIPE, text=True) for i in range(3)]
    results = [w.communicate(timeout=120)[0].split() for w in writers]
    assert all(w.returncode == 0 for w in writers) and all(problem == "ok" for _, problem in results)
    store = open_store(location)
    for i, (run_id, _) in enumerate(results):
        records = store.records(run_id)
        assert [r.round for r in records] == list(range(1, n + 1))  # type: ignore[attr-defined]
        assert {r.strategy for r in records} == {f"writer{i}"}  # type: ignore[attr-defined]


def test_visitors_see_only_their_runs_and_keep_them_a_day(location: str) -> None:
    store = open_store(location)
    mine = store.begin(CACHE, {}, label="mine", owner="visitor-a")
    theirs = store.begin(CACHE, {}, label="theirs", owner="visitor-b")
    old = store.begin(CACHE, {}, label="old", owner="visitor-a", started_at=time.time() - VISITOR_KEEP_S - 60)
    local = store.begin(CACHE, {}, label="local")
    seen = {r.id for r in store.runs(owner="visitor-a")}
    assert mine in seen and REFERENCE_ID in seen and theirs not in seen and local not in seen
    assert old not in seen  # hidden at once: a visitor's runs last a day
    assert store.get(old, owner="visitor-a") is None and store.get(old) is not None  # deleted by the next purge
    assert store.purge_visitors() == 1 and store.get(old) is None
    assert store.get(theirs, owner="visitor-a") is None
    assert not store.delete(theirs, owner="visitor-a") and not store.rename(theirs, "x", owner="visitor-a")
    assert store.get(theirs) is not None and store.get(local) is not None


def test_import_app_and_cli_exports(location: str) -> None:
    store = open_store(location)
    ids = import_export(store, EMBEDDED_DEFAULT.read_text(), EMBEDDED_DEFAULT.name)
    experiments = sorted(store.get(i).experiment for i in ids)  # type: ignore[union-attr]
    assert experiments == sorted([INPUT, OUTPUT, CACHE])
    (batch_id,) = import_export(store, EMBEDDED_BATCH.read_text(), EMBEDDED_BATCH.name)
    batch = store.get(batch_id)
    assert batch is not None and batch.experiment == BATCH and batch.source == IMPORTED
    assert batch.rounds == len(json.loads(EMBEDDED_BATCH.read_text())["levels"])
    original = json.loads(EMBEDDED_DEFAULT.read_text())
    cache_id = next(i for i in ids if store.get(i).experiment == CACHE)  # type: ignore[union-attr]
    old = [renamed(r) for r in original["rounds"] if r["experiment"] == "prefix_cache"]  # migrated to current names
    got = [{k: v for k, v in r.to_dict().items() if k in o} for r, o in zip(store.records(cache_id), old, strict=True)]
    assert got == old and old[0]["experiment"] == CACHE  # fields added since the export keep their defaults


def test_export_round_trip_keeps_label_machine_and_records(location: str, tmp_path: Path) -> None:
    store = open_store(location)
    run_id = store.begin(CACHE, {"backend": "local"}, label="laptop", machine={"cpu": "Test CPU", "cores": 8})
    for row in rounds(4):
        store.add(run_id, row)
    store.finish(run_id, STOPPED)
    saved = store.get(run_id)
    assert saved is not None
    text = export_run(saved, store.records(run_id))
    other = open_store(str(tmp_path / "friend.sqlite"))
    (copy,) = import_export(other, text, "laptop.json")
    got = other.get(copy)
    assert got is not None and got.label == "laptop" and got.machine == {"cpu": "Test CPU", "cores": 8}
    assert got.status == STOPPED and other.records(copy) == rounds(4)


@pytest.mark.parametrize(("text", "expected"), [
    ('{"settings": {},\n "rounds": [\n', "bad.json, line 3: not JSON"),
    ("[1, 2]", "bad.json, line 1: JSON, but not a Prefill Lab export"),
    ('{"findings": []}', "bad.json, line 1: JSON, but not a Prefill Lab export"),
    ('{"settings": {},\n "rounds": [\n  {"experiment": "cache", "round": 1},\n'
     '  {"experiment": "cache", "round": 2, "colour": "red"}\n]}',
     "bad.json, line 4 (round 2): unknown field 'colour'"),
    ('{"rounds": [\n\n {"experiment": "cache", "round": "one"}]}',
     "bad.json, line 3 (round 1): 'round' should be int, found 'one'"),
    ('{"rounds": [{"experiment": "cache"}]}', "bad.json, line 1 (round 1): the field 'round' is missing"),
    ('{"rounds": [{"experiment": "juggling", "round": 1}]}', "unknown experiment 'juggling'"),
    ('{"settings": [],\n "rounds": []}', "bad.json, line 1: \"settings\" should be an object"),
    ('{"run": {"format": 9},\n "rounds": [{"experiment": "cache", "round": 1}]}',
     "bad.json, line 1: export format 9 is from a newer Prefill Lab"),
    ('{"rounds": []}', "an export with no rounds or levels"),
    ('{"levels": [\n {"concurrency": 1, "output_tokens": "many"}]}',
     "bad.json, line 2 (level 1): 'output_tokens' should be int"),
])
def test_import_refuses_by_name_and_line(location: str, text: str, expected: str) -> None:
    store = open_store(location)
    before = len(store.runs())
    with pytest.raises(ImportRefused) as refused:
        import_export(store, text, "bad.json")
    assert expected in str(refused.value)
    assert len(store.runs()) == before  # nothing half-imported


def test_import_checks_every_run_before_writing_any(location: str) -> None:
    data = json.loads(EMBEDDED_DEFAULT.read_text())
    data["rounds"][-1]["ttft_ms"] = "fast"
    with pytest.raises(ImportRefused, match="'ttft_ms' should be float or null"):
        read_export(json.dumps(data, indent=2), "edited.json")
    store = open_store(location)
    with pytest.raises(ImportRefused):
        import_export(store, json.dumps(data, indent=2), "edited.json")
    assert [r.id for r in store.runs()] == [REFERENCE_ID]


def test_store_error_names_what_to_do(tmp_path: Path) -> None:
    bad = tmp_path / "runs.sqlite"
    bad.write_text("not a database at all, just text " * 100)
    with pytest.raises(StoreError, match="move it aside"):
        RunStore.open(str(bad))


def test_a_disk_that_fills_during_a_run_is_said_not_raised(tmp_path: Path) -> None:
    """The disk fills up during a run: the worker gets no exception and the store says why."""
    if os.geteuid() != 0:
        pytest.skip("mounting a small disk needs root")
    disk = tmp_path / "disk"
    disk.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=512k", "tmpfs", str(disk)],
                      capture_output=True).returncode != 0:
        pytest.skip("this machine lets root mount no tmpfs")
    try:
        store = open_store(str(disk / "runs.sqlite"))
        assert store.on_disk and store.problem == ""
        run_id = store.begin(CACHE, {}, label="the disk fills")
        for i in range(1, 401):  # about 2 MB of rounds into 512 kB
            store.add(run_id, RoundResult(CACHE, i, error="x" * 5000))
        store.finish(run_id, DONE)
        assert "cannot be used now (database or disk is full)" in store.problem and store.unsaved > 0
        saved = store.get(run_id)
        assert saved is not None and 0 < saved.rounds < 400
        store.close()
    finally:
        subprocess.run(["umount", str(disk)], check=True)


def test_a_report_of_saved_runs(location: str) -> None:
    """What the Saved runs page and ``python -m core report`` build: every run's label, machine and rounds."""
    store = open_store(location)
    ids = import_export(store, EMBEDDED_DEFAULT.read_text(), EMBEDDED_DEFAULT.name)
    entries = [(saved, store.records(saved.id)) for run_id in [*ids, REFERENCE_ID]
               if (saved := store.get(run_id)) is not None]
    html = build_report(entries, ContentWords("en"), "en")
    assert len(entries) == 4 and all(saved.label in html for saved, _ in entries) and "Mac Studio" in html
