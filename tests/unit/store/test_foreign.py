"""Another program's SQLite file with a ``schema_version`` table (issue 27, item 3): recognised before anything is
written, never written to (checked byte for byte, and no file beside it), said in a sentence on the CLI and pages."""

from __future__ import annotations

import hashlib
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from core.store import REFERENCE_ID, open_store
from tests.support import ROOT
from tests.support.apptest import app

VARIANTS = {
    # no column named version: "no such column: version" before
    "other_column": "CREATE TABLE schema_version (v INTEGER); INSERT INTO schema_version VALUES (7);"
                    "CREATE TABLE notes (body TEXT); INSERT INTO notes VALUES ('keep me');",
    # a version but none of the store's tables: "no such table: runs" before
    "no_runs": "CREATE TABLE schema_version (version INTEGER); INSERT INTO schema_version VALUES (1);"
               "CREATE TABLE accounts (name TEXT); INSERT INTO accounts VALUES ('alice');",
    # a version as text: a str/int comparison before
    "text_version": "CREATE TABLE schema_version (version TEXT); INSERT INTO schema_version VALUES ('2.4.1');"
                    "CREATE TABLE runs (id TEXT, cmd TEXT); INSERT INTO runs VALUES ('a', 'make');",
    # version 0 beside its own tables: migrated (written to) before
    "version_zero": "CREATE TABLE schema_version (version INTEGER); INSERT INTO schema_version VALUES (0);"
                    "CREATE TABLE invoices (total REAL); INSERT INTO invoices VALUES (12.5);",
}


def foreign_file(folder: Path, variant: str) -> Path:
    path = folder / "app.db"
    conn = sqlite3.connect(path)
    conn.executescript(VARIANTS[variant])
    conn.commit()
    conn.close()
    return path


def digest(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir())}


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_a_foreign_file_is_refused_before_anything_is_written(tmp_path: Path, variant: str) -> None:
    path = foreign_file(tmp_path, variant)
    before = digest(tmp_path)
    store = open_store(str(path))
    assert not store.on_disk and "not a Prefill Lab run store" in store.problem and str(path) in store.problem
    assert "It was left as it is" in store.problem
    run_id = store.begin("cache", {}, label="measured anyway")  # measuring goes on, in memory
    assert store.get(run_id) is not None and store.get(REFERENCE_ID) is not None  # experiment 3's reference too
    store.close()
    assert digest(tmp_path) == before  # the same bytes, and no -wal or -journal beside it


@pytest.mark.slow
@pytest.mark.parametrize("variant", ["other_column", "text_version"])
def test_the_cli_says_it_in_a_sentence(tmp_path: Path, variant: str) -> None:
    path = foreign_file(tmp_path, variant)
    before = digest(tmp_path)
    done = subprocess.run([sys.executable, "-m", "core", "runs", "list"], cwd=ROOT, capture_output=True, text=True,
                          env={**os.environ, "PREFILL_LAB_DB": str(path)}, timeout=120)
    assert done.returncode == 0 and "Traceback" not in done.stderr
    assert f"warning: The run store {path} is not a Prefill Lab run store" in done.stderr
    assert digest(tmp_path) == before


@pytest.mark.slow
@pytest.mark.parametrize("page", ["app_pages/home.py", "app_pages/cache.py", "app_pages/runs.py"])
def test_pages_say_it_in_a_sentence(tmp_path: Path, page: str) -> None:
    path = foreign_file(tmp_path, "no_runs")
    before = digest(tmp_path)
    at = app()
    at.secrets["PREFILL_LAB_DB"] = str(path)
    at.switch_page(page).run()
    assert not at.exception
    if page != "app_pages/home.py":
        assert any("is not a Prefill Lab run store" in w.value for w in at.warning)
    assert digest(tmp_path) == before
