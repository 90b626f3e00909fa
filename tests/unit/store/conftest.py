"""The store's tests run on both engines: ``location`` is a SQLite file, then a fresh PostgreSQL database."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(params=["sqlite", "postgresql"])
def location(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return str(tmp_path / "runs.sqlite")
    url: str = request.getfixturevalue("postgres_url")
    return url
