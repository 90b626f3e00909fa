"""The store's tables, by version: `MIGRATIONS[n]` turns a version ``n - 1`` database into version ``n``.

One list for both engines (`core.store.engine`): a script is SQL both read (``?`` placeholders,
TEXT, INTEGER, BIGINT, DOUBLE PRECISION), or a mapping of one script per dialect where they differ
(an auto-numbered key: ``INTEGER PRIMARY KEY`` in SQLite, ``BIGINT GENERATED ALWAYS AS IDENTITY`` in
PostgreSQL). `migrate` applies what a database lacks in one transaction, under a lock every replica
takes, and records the version in ``schema_version``; a database newer than `SCHEMA_VERSION` is never
written to (an older Prefill Lab would not know what its columns mean).

Add a version by appending to `MIGRATIONS` (a feature's own tables too: the hosted demo's budget
ledger and leases); never edit one that has shipped. Version 1 said REAL for the two dates: SQLite
reads DOUBLE PRECISION as the same REAL, and PostgreSQL's REAL (4 bytes) would round a date to
minutes, so the word was changed and nothing else.
"""

from __future__ import annotations

from core.store.engine import Database, DatabaseError, Migration

SCHEMA_VERSION = 3
MIGRATE_LOCK = "prefill-lab: migrate"

MIGRATIONS: dict[int, Migration] = {
    1: """
CREATE TABLE schema_version (version INTEGER NOT NULL);
INSERT INTO schema_version VALUES (0);
CREATE TABLE runs (
    id TEXT PRIMARY KEY,
    experiment TEXT NOT NULL,
    label TEXT NOT NULL,
    backend TEXT NOT NULL DEFAULT '',
    model TEXT NOT NULL DEFAULT '',
    settings TEXT NOT NULL,             -- JSON, never a key
    machine TEXT NOT NULL,              -- JSON: CPU model, cores, system; a probe when measured
    summary TEXT NOT NULL DEFAULT '{}', -- JSON
    source TEXT NOT NULL,               -- measured | imported | reference
    owner TEXT NOT NULL DEFAULT '',     -- a hosted visitor's id; '' on a local install
    status TEXT NOT NULL,               -- running | done | stopped | failed (cut is running with its writer gone)
    started_at DOUBLE PRECISION NOT NULL,
    finished_at DOUBLE PRECISION,
    writer_host TEXT NOT NULL DEFAULT '',
    writer_pid INTEGER,
    writer_start TEXT NOT NULL DEFAULT ''  -- the writer's process start time, so a reused pid is not taken for it
);
CREATE INDEX runs_by_owner ON runs (owner, experiment, started_at);
CREATE TABLE rounds (
    run_id TEXT NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    seq INTEGER NOT NULL,
    record TEXT NOT NULL,               -- JSON: a RoundResult or a BatchLevel, as its to_dict()
    PRIMARY KEY (run_id, seq)
);
""",
    2: """
ALTER TABLE runs ADD COLUMN author TEXT NOT NULL DEFAULT '';  -- who measured it, on a team's store ('' alone)
""",
    3: """
CREATE TABLE budget_spends (            -- the hosted demo's operator key: one row per run on it (core.store.ledger)
    id TEXT PRIMARY KEY,
    visitor TEXT NOT NULL,              -- the browser's hash, as in the operator's log; never a cookie or address
    tokens BIGINT NOT NULL,             -- the estimate while the run goes, what it sent once settled
    reserved_at DOUBLE PRECISION NOT NULL,
    settled INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX budget_spends_by_time ON budget_spends (reserved_at);
CREATE INDEX budget_spends_by_visitor ON budget_spends (visitor, reserved_at);
CREATE TABLE run_leases (               -- a running or waiting hosted run's place (core.store.leases)
    run_id TEXT PRIMARY KEY,            -- the saved run's id
    arrival BIGINT NOT NULL,            -- its place in the one line of every replica
    visitor TEXT NOT NULL,
    replica TEXT NOT NULL,              -- host:pid of the replica running it
    state TEXT NOT NULL,                -- waiting | running
    heartbeat DOUBLE PRECISION NOT NULL -- renewed by its replica; older than the lease time: the replica is gone
);
""",
}

# What a version-1 store has at least: how a database is known as the store's own before anything is written.
OWN_TABLES: dict[str, frozenset[str]] = {
    "schema_version": frozenset({"version"}),
    "runs": frozenset({"id", "experiment", "label", "backend", "model", "settings", "machine", "summary", "source",
                       "owner", "status", "started_at", "finished_at", "writer_host", "writer_pid", "writer_start"}),
    "rounds": frozenset({"run_id", "seq", "record"}),
}


def foreign(db: Database, shared: bool) -> str | None:
    """Why this database is not a Prefill Lab store, or None (it is one, or it is empty). Reads only.

    A file (``shared`` False) is the store's own when it is empty or has the store's tables; a server's
    database (``shared``) may hold other programs' tables too, as long as none takes the store's names.
    """
    tables = db.tables()
    ours = {name: tables[name] for name in OWN_TABLES if name in tables}
    if not ours:
        if tables and not shared:
            return f"an SQLite database but not a Prefill Lab run store (tables: {', '.join(sorted(tables))})"
        return None
    for name, columns in OWN_TABLES.items():
        if name not in tables:
            return (f"not a Prefill Lab run store: it has a table {', '.join(sorted(ours))} but no table {name} "
                    f"(tables: {', '.join(sorted(tables))})")
        missing = sorted(columns - set(tables[name]))
        if missing:
            return f"not a Prefill Lab run store: its table {name} has no column {', '.join(missing)}"
    versions = [row[0] for row in db.execute("SELECT version FROM schema_version").rows]
    if len(versions) != 1 or not isinstance(versions[0], int) or isinstance(versions[0], bool):
        return f"not a Prefill Lab run store: its schema_version holds {versions[:3]!r}, not one whole number"
    return None


def version(db: Database) -> int:
    """The store's version (0: empty). Reads only; call `foreign` first."""
    if "schema_version" not in db.tables():
        return 0
    return int(db.execute("SELECT version FROM schema_version").scalar())


def migrate(db: Database) -> None:
    """Bring the database to `SCHEMA_VERSION`: every missing script in one transaction, the version re-read
    under the lock (another process or replica may have just done it)."""
    with db.transaction(lock=MIGRATE_LOCK) as tx:
        done = version(db)
        if done > SCHEMA_VERSION:
            raise DatabaseError(f"The run store {db.location} was written by a newer Prefill Lab (store version "
                                f"{done}; this one reads up to {SCHEMA_VERSION}). It was left as it is: update Prefill "
                                "Lab, or set PREFILL_LAB_DB to another database", transient=False)
        for step in range(done + 1, SCHEMA_VERSION + 1):
            for statement in db.script(MIGRATIONS[step]):
                tx.execute(statement)
            tx.execute("UPDATE schema_version SET version = ?", (step,))
