"""The run store's tests on both engines: ``location`` is a SQLite file, then a fresh PostgreSQL database;
`contents` is everything a store holds, as bytes (its files, or every row of every table)."""

from __future__ import annotations

from pathlib import Path

import psycopg
import pytest

from core.store.engine import is_url


@pytest.fixture(params=["sqlite", "postgresql"])
def location(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return str(tmp_path / "data" / "runs.sqlite")
    url: str = request.getfixturevalue("postgres_url")
    return url


def contents(location: str) -> bytes:
    """Every byte the store keeps: the SQLite file and its WAL, or each table's rows as PostgreSQL prints them."""
    if not is_url(location):
        return b"".join(path.read_bytes() for path in sorted(Path(location).parent.iterdir()) if path.is_file())
    with psycopg.connect(location) as conn:
        tables = [row[0] for row in conn.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema()").fetchall()]
        assert tables, "the store has no tables"
        return b"".join(str(row[0]).encode() for table in tables
                        for row in conn.execute(f'SELECT t::text FROM "{table}" t').fetchall())
