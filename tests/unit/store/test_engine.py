"""The engine layer (core/store/engine.py, schema.py): one API and one migration path on SQLite and PostgreSQL,
and a URL's password never shown."""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

import pytest

from core.hosting import HostedSettings, Refused
from core.store import RunStore, open_store
from core.store.engine import DatabaseError, hidden, password, shown
from core.store.ledger import StoreLedger
from core.store.schema import MIGRATIONS, SCHEMA_VERSION, version
from tests.support.postgres import Cluster


def test_a_urls_password_is_never_shown() -> None:
    assert shown("postgresql://team:s3cr%40t-pw@db.local:5432/runs") == "postgresql://team:***@db.local:5432/runs"
    assert shown("postgres://db.local/runs?user=team&password=s3cret-pw&sslmode=require") == \
        "postgres://db.local/runs?user=team&password=***&sslmode=require"
    assert shown("/home/me/runs.sqlite") == "/home/me/runs.sqlite" and shown(":memory:") == ":memory:"
    assert password("postgresql://team:s3cret-pw@db.local/runs") == "s3cret-pw"


def test_the_store_opens_on_both_engines_at_the_current_version(location: str) -> None:
    store = open_store(location)
    assert store.problem == "" and store.on_disk
    assert version(store.db) == SCHEMA_VERSION
    assert "pw-" not in store.location  # the location a page shows


@pytest.mark.parametrize("url", ["postgresql://u:pw-leak-999@127.0.0.1:notaport/db",
                                 "postgresql://u:pw-leak-999@127.0.0.1:1/db?bogus=1",
                                 "postgresql://u:p%40w@127.0.0.1:1/db", "postgresql://127.0.0.1:1/db?user=u&password=p%40w"])
def test_a_malformed_or_refused_url_is_a_sentence_without_its_password(url: str) -> None:
    store = open_store(url)
    assert "cannot be used now (cannot connect: " in store.problem and "***" in store.location
    assert "pw-leak-999" not in store.problem and "p@w" not in store.problem and "p%40w" not in store.problem


def test_a_wrong_password_is_a_sentence_without_it(postgres: Cluster) -> None:
    url = postgres.url(postgres.database()).replace(postgres.password, "pw-wrong-guess-123")
    store = open_store(url)
    assert "refused the login (" in store.problem and "password authentication failed" in store.problem
    assert "pw-wrong-guess-123" not in store.problem and "pw-wrong-guess-123" not in store.location
    assert "check the user name, the password" in store.problem and "Start the database server" not in store.problem
    assert not store.on_disk and store.failing == ""  # not waited for as a server that is down: in memory, said


def test_a_version_1_file_is_migrated_in_place(tmp_path: Path) -> None:
    db = tmp_path / "runs.sqlite"
    conn = sqlite3.connect(db)
    conn.executescript(str(MIGRATIONS[1]) + "UPDATE schema_version SET version = 1;")
    conn.execute("INSERT INTO runs (id, experiment, label, settings, machine, source, status, started_at) "
                 "VALUES ('old', 'cache', 'from version 1', '{}', '{}', 'measured', 'done', 1.5)")
    conn.commit()
    conn.close()
    store = RunStore.open(str(db))
    (old,) = [r for r in store.runs() if r.id == "old"]
    assert old.label == "from version 1" and old.author == "" and version(store.db) == SCHEMA_VERSION


def test_transactions_roll_back_and_a_named_lock_serialises_them(location: str) -> None:
    """What the budget ledger builds on: a read-then-write under one lock never interleaves with another's."""
    first, second = open_store(location), open_store(location)
    first.db.execute("CREATE TABLE counter (n INTEGER NOT NULL)")
    first.db.execute("INSERT INTO counter VALUES (0)")
    with pytest.raises(DatabaseError), first.db.transaction() as tx:
        tx.execute("UPDATE counter SET n = 100")
        tx.execute("INSERT INTO no_such_table VALUES (1)")
    assert first.db.execute("SELECT n FROM counter").scalar() == 0

    def bump(store: RunStore) -> None:
        for _ in range(25):
            with store.db.transaction(lock="counter") as tx:
                n = tx.execute("SELECT n FROM counter").scalar()
                tx.execute("UPDATE counter SET n = ?", (n + 1,))

    threads = [threading.Thread(target=bump, args=(s,)) for s in (first, second)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert first.db.execute("SELECT n FROM counter").scalar() == 50


def test_an_at_sign_in_the_password_shows_no_part_of_it() -> None:
    """libpq ends the password at the first ``@``: the rest became the host, named in its message."""
    url = "postgresql://prefill:Pa@ss-Odd77@127.0.0.1:1/x"
    store = open_store(url)
    assert "ss-Odd77" not in store.problem and "ss-Odd77" not in store.location and "Pa@" not in store.problem
    assert "%40" in store.problem  # what to do: percent-encode it
    with pytest.raises(Refused) as refused:
        StoreLedger(store.db, down=store.problem).reserve("v", 10, HostedSettings(hosted=True))
    assert "ss-Odd77" not in str(refused.value) and refused.value.key == "ledger_down"
    assert "ss-Odd77" not in shown(url) and "Pa" not in shown(url)


def test_every_part_of_the_user_information_is_masked_in_a_drivers_message() -> None:
    url = "postgresql://prefill:Pa@ss-Odd77@127.0.0.1:1/x"
    said = hidden("failed to resolve host 'ss-Odd77@127.0.0.1': [Errno -2]; password Pa@ss-Odd77", url)
    assert "ss-Odd77" not in said and "Pa@ss" not in said and "127.0.0.1" in said


@pytest.mark.parametrize("url", ["postgresql://u:pw-leak-999@[::1x]:5432/db", "postgresql://u:pw-leak-999@[v1.x]/db",
                                 "postgresql://u:pw-leak-999@[::1/db"])
def test_a_malformed_host_is_a_sentence_not_a_traceback(url: str) -> None:
    store = open_store(url)
    assert "PREFILL_LAB_DB" in store.problem and "pw-leak-999" not in store.problem + store.location
    assert "pw-leak-999" not in shown(url)
