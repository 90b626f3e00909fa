"""The store's tables, by version: `MIGRATIONS[n]` turns a version ``n - 1`` database into version ``n``.

A database records its version in ``schema_version``; a file newer than `SCHEMA_VERSION` is never
written to (an older Prefill Lab would not know what its columns mean). Add a version by appending
a script: never edit one that has shipped.
"""

from __future__ import annotations

SCHEMA_VERSION = 1

MIGRATIONS: dict[int, str] = {
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
    started_at REAL NOT NULL,
    finished_at REAL,
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
}
