"""The store's two engines behind one small API: SQLite (a file, or memory) and PostgreSQL (a URL).

``PREFILL_LAB_DB`` is a path, ``:memory:`` or a ``postgresql://`` URL (`connect`). Everything
above this module writes SQL once for both: ``?`` placeholders (psycopg's ``%s`` is made here),
standard types (TEXT, INTEGER, BIGINT, DOUBLE PRECISION), no engine-only functions. Where a
migration cannot be the same on both, it gives one script per dialect (`core.store.schema`).

Why psycopg 3 with hand-written SQL, not SQLAlchemy Core with Alembic: the store is a dozen
statements that were SQLite SQL already; what it must guarantee (never write a byte to a file
that is not its own, WAL, busy time-outs, a round committed before the next request) lives at the
driver's level, which an ORM layer hides; Alembic would bring a second version table beside the
``schema_version`` every existing store has, and 40 MB of packages to a hosted deploy. One
dependency (``psycopg[binary]``) and one numbered list of scripts do it.

A password in a URL is never shown: `shown` is the one function that turns a location into text
for a page, a log line or an error message, and every driver message has every part of the user
information masked (`hidden`: libpq may quote the whole connection string, or name as the host what
an unencoded ``@`` cut off the password). Such a URL, or a malformed one, is refused before the
driver sees it (`url_problem`).
"""

from __future__ import annotations

import hashlib
import re
import sqlite3
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl, unquote, urlencode, urlsplit

import psycopg

from core.secrets import MASK

SQLITE, POSTGRESQL = "sqlite", "postgresql"
URL_SCHEMES = ("postgresql://", "postgres://")
CONNECT_TIMEOUT_S = 3  # a server that does not answer: the page says so after this long, not after TCP's minutes
# what libpq says when the server answered but refused the login (no SQLSTATE comes with a failed connection)
REFUSED_LOGIN = ("password authentication failed", "no password supplied", "pg_hba.conf", "does not exist")
RETRY_S = 1.0  # after a failed connection, statements fail at once for this long instead of each waiting again

# One script for both engines, or one per dialect ({"sqlite": ..., "postgresql": ...}).
Migration = str | Mapping[str, str]


class DatabaseError(Exception):
    """A statement or a connection failed. The message (the reason, without the location) is safe to show.

    ``transient``: worth trying again later (the server unreachable, the disk full, the file locked);
    otherwise the statement itself is wrong for this database (a duplicate id, a foreign table).
    ``refused_login``: the server answered and refused the URL's user, password or database: no use
    waiting for it at start (tried again later, in case the password was changed during a run).
    """

    def __init__(self, message: str, transient: bool, refused_login: bool = False) -> None:
        super().__init__(message)
        self.transient = transient
        self.refused_login = refused_login


def is_url(location: str) -> bool:
    return location.startswith(URL_SCHEMES)


def _parts(location: str) -> tuple[str, str, str]:
    """A URL as (``scheme://``, its user information, the rest), by hand: a malformed URL (an invalid IPv6 host)
    still splits, and the user information ends at the last ``@`` before the query, so a password with an
    unencoded ``@`` or ``/`` stays whole inside it (libpq would end it at the first ``@``)."""
    scheme, sep, rest = location.partition("://")
    at = rest.partition("?")[0].rfind("@")
    return scheme + sep, rest[:at] if at >= 0 else "", rest[at + 1:]


def password(location: str) -> str | None:
    """The password a URL carries (in its user part or as ``?password=``), else None."""
    if not is_url(location):
        return None
    _, info, rest = _parts(location)
    given = dict(parse_qsl(rest.partition("?")[2])).get("password")
    return unquote(info.partition(":")[2]) or given or None


def _secrets(location: str) -> list[str]:
    """Every text a message may show of a URL's secret, longest first: the password (as written and decoded),
    and each part of the user information a driver could split off at an ``@``, ``:`` or ``/``."""
    _, info, rest = _parts(location)
    user, colon, secret = info.partition(":")
    whole = secret if colon else info if "@" in info else ""
    found = {whole, unquote(whole), password(location) or ""}
    for text in list(found):
        found.update(piece for piece in re.split(r"[@:/]", text) if len(piece) >= 3)
    if not colon and "@" in info:
        found.discard(user)
    return sorted(found - {""}, key=len, reverse=True)


def hidden(text: str, location: str) -> str:
    """``text`` (ours or a driver's) with every part of ``location``'s secret masked."""
    for secret in _secrets(location) if is_url(location) else ():
        text = text.replace(secret, MASK)
    return text


def url_problem(location: str) -> str:
    """Why a PostgreSQL URL cannot be used as written, in words ("" when it can)."""
    _, info, _ = _parts(location)
    if "@" in info:
        return ("has an '@' in its user name or password, which ends them early: write each '@' there as %40 "
                "(percent-encoded)")
    try:
        urlsplit(location)
    except ValueError as exc:
        return f"is not a valid URL ({exc}): check its host (an IPv6 address goes in brackets, as [::1])"
    return ""


def shown(location: str) -> str:
    """A store's location as it may appear on a page, in a log or in a message: a URL's password as ``***``
    (the whole user information when an unencoded ``@`` leaves no telling where the name ends)."""
    if not is_url(location):
        return location
    scheme, info, rest = _parts(location)
    head, mark, query = rest.partition("?")
    if info:
        user, colon, _ = info.partition(":")
        info = (MASK if "@" in user else user + (f":{MASK}" if colon else "")) + "@"
    if mark:
        query = urlencode([(k, MASK if k == "password" else v) for k, v in parse_qsl(query)], safe="/*")
    return hidden(f"{scheme}{info}{head}{mark}{query}", location)


@dataclass(frozen=True)
class Result:
    """A statement's rows (all fetched) and how many rows it changed."""

    rows: list[tuple[Any, ...]]
    rowcount: int

    def one(self) -> tuple[Any, ...] | None:
        return self.rows[0] if self.rows else None

    def scalar(self) -> Any:
        return self.rows[0][0] if self.rows else None


class Transaction:
    """Statements run inside one transaction (`Database.transaction`)."""

    def __init__(self, run: Callable[[str, Sequence[Any]], Result], now_sql: str) -> None:
        self._run = run
        self.now_sql = now_sql

    def execute(self, sql: str, params: Sequence[Any] = ()) -> Result:
        return self._run(sql, params)

    def now(self) -> float:
        """The database's clock now, in seconds since 1970 (`Database.now_sql`)."""
        return float(self._run(f"SELECT {self.now_sql}", ()).scalar())


def lock_id(name: str) -> int:
    """A named lock as PostgreSQL's advisory locks take it (a signed 64-bit number)."""
    return int.from_bytes(hashlib.blake2b(name.encode(), digest_size=8).digest(), "big", signed=True)


class Database(ABC):
    """One connection to one database, shared by a process's threads (a statement at a time).

    ``execute`` runs one statement in its own transaction; ``transaction(lock=...)`` runs several in
    one, and with ``lock`` also excludes every other process's transaction that names the same lock
    (SQLite: ``BEGIN IMMEDIATE`` already excludes every other writer; PostgreSQL: an advisory lock).
    """

    dialect: str
    location: str  # as `shown`: safe to print
    # The database's own clock in seconds since 1970, for times every process compares (budgets, leases): one
    # clock for every replica, whatever each host's says. SQLite's is the host's own (one host shares a file).
    now_sql: str

    def __init__(self) -> None:
        self._lock = threading.RLock()

    @abstractmethod
    def _execute(self, sql: str, params: Sequence[Any]) -> Result: ...

    @abstractmethod
    def _begin(self, lock: str | None) -> None: ...

    @abstractmethod
    def _end(self, commit: bool) -> None: ...

    @abstractmethod
    def tables(self) -> dict[str, dict[str, str]]:
        """Every table of the store's schema with its columns and their declared types (nothing is written)."""

    @abstractmethod
    def close(self) -> None: ...

    def execute(self, sql: str, params: Sequence[Any] = ()) -> Result:
        with self._lock:
            return self._execute(sql, params)

    @contextmanager
    def transaction(self, lock: str | None = None) -> Iterator[Transaction]:
        with self._lock:
            self._begin(lock)
            try:
                yield Transaction(self._execute, self.now_sql)
            except BaseException:
                self._end(commit=False)
                raise
            self._end(commit=True)

    def now(self) -> float:
        """The database's clock now (`now_sql`)."""
        return float(self.execute(f"SELECT {self.now_sql}").scalar())

    def script(self, migration: Migration) -> list[str]:
        """A migration as this dialect's single statements."""
        text = migration if isinstance(migration, str) else migration[self.dialect]
        statements, buffer = [], ""
        for line in text.splitlines(keepends=True):
            buffer += line
            if sqlite3.complete_statement(buffer):  # a lexer for SQL's quotes and comments: good for both
                statements.append(buffer.strip())
                buffer = ""
        return statements


def _sqlite_error(exc: sqlite3.Error) -> DatabaseError:
    text = str(exc)
    transient = isinstance(exc, sqlite3.OperationalError) and not text.startswith(("no such", "near "))
    return DatabaseError(text, transient)


class SQLite(Database):
    """A SQLite database: the store's file (opened and checked by `core.store.db`) or memory."""

    dialect = SQLITE
    now_sql = "(julianday('now') - 2440587.5) * 86400.0"

    def __init__(self, conn: sqlite3.Connection, location: str) -> None:
        super().__init__()
        self._conn = conn
        self.location = location

    def _execute(self, sql: str, params: Sequence[Any]) -> Result:
        try:
            cursor = self._conn.execute(sql, params)
            return Result(cursor.fetchall(), cursor.rowcount)
        except sqlite3.Error as exc:
            raise _sqlite_error(exc) from exc

    def _begin(self, lock: str | None) -> None:
        self._execute("BEGIN IMMEDIATE", ())

    def _end(self, commit: bool) -> None:
        if self._conn.in_transaction:
            self._execute("COMMIT" if commit else "ROLLBACK", ())

    def tables(self) -> dict[str, dict[str, str]]:
        names = [row[0] for row in self._execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite\\_%' ESCAPE '\\'", ()).rows]
        return {name: {row[1]: str(row[2]).upper() for row in
                       self._execute(f"PRAGMA table_info(\"{name.replace(chr(34), chr(34) * 2)}\")", ()).rows}
                for name in names}

    def close(self) -> None:
        with self._lock:
            self._conn.close()


class PostgreSQL(Database):
    """A PostgreSQL database by URL, connected on first use and again after the server comes back.

    ``on_connect`` runs on every new connection before any statement (the store checks and migrates
    there), so a server that was down when the app started is taken up when it answers.
    """

    dialect = POSTGRESQL
    now_sql = "CAST(EXTRACT(EPOCH FROM clock_timestamp()) AS DOUBLE PRECISION)"  # now, not the transaction's start

    def __init__(self, url: str, on_connect: Callable[[PostgreSQL], None] | None = None) -> None:
        super().__init__()
        self._url = url
        self.location = shown(url)
        self._conn: psycopg.Connection[tuple[Any, ...]] | None = None
        self._failed_at = -float("inf")
        self._last_error = ""
        self._refused_login = False
        self._on_connect = on_connect
        self._in_transaction = False

    def _say(self, exc: BaseException) -> str:
        """A driver's message in one line, the password masked (libpq may quote the whole connection string)."""
        return hidden(" ".join(str(exc).split()) or type(exc).__name__, self._url)

    def _connection(self) -> psycopg.Connection[tuple[Any, ...]]:
        if self._conn is not None and not self._conn.closed:
            return self._conn
        if time.monotonic() - self._failed_at < RETRY_S:
            raise DatabaseError(self._last_error, transient=True, refused_login=self._refused_login)
        try:
            self._conn = psycopg.connect(self._url, autocommit=True, connect_timeout=CONNECT_TIMEOUT_S,
                                         application_name="prefill-lab")
        except psycopg.Error as exc:
            self._failed_at = time.monotonic()
            said = self._say(exc)
            self._refused_login = any(words in said for words in REFUSED_LOGIN)
            self._last_error = (f"the server refused the login ({said}): check the user name, the password and the "
                                "database name in the URL" if self._refused_login else f"cannot connect: {said}")
            raise DatabaseError(self._last_error, transient=True, refused_login=self._refused_login) from exc
        self._refused_login = False
        if self._on_connect is not None:
            try:
                self._on_connect(self)
            except BaseException:
                self._drop()
                raise
        return self._conn

    def _drop(self) -> None:
        if self._conn is not None:
            try:
                self._conn.close()
            except psycopg.Error:
                pass
        self._conn = None
        self._in_transaction = False

    def _execute(self, sql: str, params: Sequence[Any]) -> Result:
        conn = self._connection()
        try:
            cursor = conn.execute(sql.replace("%", "%%").replace("?", "%s"), tuple(params))
            rows = cursor.fetchall() if cursor.description else []
            return Result(rows, cursor.rowcount)
        except psycopg.Error as exc:
            lost = conn.closed or conn.broken
            if lost:
                self._drop()
                self._failed_at = time.monotonic()
            transient = lost or isinstance(exc, psycopg.OperationalError)
            message = f"the connection was lost: {self._say(exc)}" if lost else self._say(exc)
            if lost:
                self._last_error = message
            raise DatabaseError(message, transient) from exc

    def _begin(self, lock: str | None) -> None:
        self._execute("BEGIN", ())
        self._in_transaction = True
        if lock is not None:
            self._execute("SELECT pg_advisory_xact_lock(?)", (lock_id(lock),))

    def _end(self, commit: bool) -> None:
        if self._in_transaction and self._conn is not None:
            self._in_transaction = False
            self._execute("COMMIT" if commit else "ROLLBACK", ())

    def tables(self) -> dict[str, dict[str, str]]:
        found: dict[str, dict[str, str]] = {}
        for table, column, kind in self._execute(
                "SELECT table_name, column_name, data_type FROM information_schema.columns "
                "WHERE table_schema = current_schema() ORDER BY table_name, ordinal_position", ()).rows:
            found.setdefault(str(table), {})[str(column)] = str(kind).upper()
        return found

    def ping(self) -> None:
        """Connect now (checking and migrating), or raise `DatabaseError`."""
        self.execute("SELECT 1")

    def close(self) -> None:
        with self._lock:
            self._drop()
