"""The run store: every run of the app and the CLI, written round by round to one database.

Two engines (`core.store.engine`): SQLite, one file (the default: `make run` needs nothing else),
safe for several processes at once (the app, a second app, a CLI run), a committed round surviving a
``kill -9``: WAL mode lets readers go on while a round is written, ``synchronous=NORMAL`` makes a
commit cost tens of microseconds (a power cut may lose the last rounds, a crash of the app does not).
Or PostgreSQL, by URL: a team's shared store, or the hosted demo's replicas.

A run is ``running`` until its writer says how it ended (`DONE`, `STOPPED`, `FAILED`). A run still
``running`` whose writing process is gone (killed, crashed, the machine restarted) is shown as
`CUT`, with every round it wrote.

`RunStore.open` refuses a file it cannot use safely (corrupt, locked, read-only, from a newer
Prefill Lab, not a Prefill Lab store) with a `StoreError` that says what to do, and never writes to
it; `core.store.open_store` then falls back to an in-memory store. A database that fails later (the
server gone, the disk full) loses nothing: a run's writes wait in memory, in order, and are written
when it works again (`unsaved` counts them, `problem` says it).

On a team's store (PostgreSQL) each run carries its author (`author`: ``$PREFILL_LAB_AUTHOR``, else
the login name), every run is listed for everyone, and each renames and deletes only their own.
"""

from __future__ import annotations

import getpass
import json
import math
import os
import socket
import sqlite3
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

from core.conclusions import Conclusion, MachineState
from core.export import Record
from core.runs.runner import DONE, FAILED, RUNNING, STOPPED
from core.secrets import redact, without_keys
from core.store.codec import compact, record_from_dict
from core.store.engine import SQLITE, Database, DatabaseError, PostgreSQL, SQLite, is_url, shown, url_problem
from core.store.machine import machine_info
from core.store.schema import SCHEMA_VERSION, foreign, migrate, version

ENV = "PREFILL_LAB_DB"
AUTHOR_ENV = "PREFILL_LAB_AUTHOR"
MEMORY = ":memory:"
CUT = "cut"  # shown, never stored: a run left ``running`` by a process that is gone
ENDED = (DONE, STOPPED, FAILED)
MEASURED, IMPORTED, REFERENCE = "measured", "imported", "reference"
VISITOR_KEEP_S = 24 * 3600  # hosted mode: a visitor's runs are deleted a day after they started
PURGE_EVERY_S = 600  # how often, at most, that deletion runs (reads hide an expired run at once)
OPEN_TIMEOUT_MS = 2000  # how long opening waits for another process's lock before saying the file is locked
WRITE_TIMEOUT_MS = 10000  # a round waits this long for another writer (each holds the lock for microseconds)
MAX_WAITING = 100_000  # writes kept in memory while the database fails (a round is about 1 kB: 100 MB at most)


class StoreError(Exception):
    """The store file cannot be used; the message says why and what to do. The file was not changed."""


def default_location() -> str:
    """``$PREFILL_LAB_DB``, else ``$XDG_DATA_HOME/prefill-lab/runs.sqlite`` (``~/.local/share`` by default)."""
    if os.environ.get(ENV):
        return os.environ[ENV]
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return str(Path(base) / "prefill-lab" / "runs.sqlite")


def default_author(shared: bool) -> str:
    """Who this process's runs are by: ``$PREFILL_LAB_AUTHOR``; else, on a shared store, the login name;
    else "" (a laptop's own file needs no name on every run)."""
    given = os.environ.get(AUTHOR_ENV, "").strip()
    if given or not shared:
        return given
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return ""


@dataclass(frozen=True)
class SavedRun:
    """One stored run, without its records (`RunStore.records`)."""

    id: str
    experiment: str
    label: str
    backend: str
    model: str
    settings: dict[str, Any]
    machine: dict[str, Any]
    summary: dict[str, Any]
    source: str
    owner: str
    status: str  # DONE, STOPPED, FAILED, RUNNING or CUT
    started_at: float
    finished_at: float | None
    rounds: int
    author: str = ""  # who measured it, on a team's store; "" otherwise

    @property
    def state(self) -> MachineState:
        """The machine during the run as the meter saw it (unmeasured for a run saved before it was kept)."""
        return MachineState.from_dict(self.machine.get("state"))

    @property
    def conclusion(self) -> Conclusion | None:
        """What the run showed, computed once as it ended; None for a run without one (or one not understood:
        an imported file's, which no page must fail on)."""
        found = self.summary.get("conclusion")
        try:
            return Conclusion.from_dict(found) if isinstance(found, dict) else None
        except ValueError:
            return None


def _process_start(pid: int) -> str:
    """When a process started (psutil: Linux, macOS, Windows), to tell it from a later one given the same pid;
    "" where it cannot be read (another user's process on some systems), and then the pid alone is checked."""
    try:
        return f"{psutil.Process(pid).create_time():.2f}"
    except (psutil.Error, OSError):
        return ""


def _alive(host: str, pid: int | None, start: str) -> bool:
    """Whether the process that wrote a run still runs. A writer that cannot be checked (another host's, or a
    system that will not say) is taken as alive: its run shows as running, never as cut while it may write."""
    if host != socket.gethostname():
        return True
    if pid is None:
        return False
    try:
        if not psutil.pid_exists(pid):  # not os.kill(pid, 0), which ends the process on Windows
            return False
    except (psutil.Error, OSError):
        return True
    return not start or _process_start(pid) == start


class RunStore:
    """Runs and their records in one database (`core.store.engine`); safe to share between threads of a process."""

    def __init__(self, db: Database, problem: str = "", author: str | None = None) -> None:
        self.db = db
        self._lock = threading.RLock()
        self._purged_at = -math.inf
        self.location = db.location  # safe to show: a URL's password is masked
        self._opened = problem  # why this store is in memory though a file was asked for; "" otherwise
        self._failing = ""  # why the database refuses writes or reads now ("" when it works)
        self._pending: list[tuple[str, tuple[Any, ...]]] = []  # writes kept for when it works again
        self.lost = 0  # writes dropped because `MAX_WAITING` were waiting already
        self.when_up: Callable[[], None] | None = None  # called once, the first time the database works
        self.shared = db.dialect != SQLITE
        self.author = default_author(self.shared) if author is None else author
        self._secrets: dict[str, tuple[str, ...]] = {}
        self._machines: dict[str, dict[str, Any]] = {}  # each run begun here and not finished: its machine
        self._host, self._pid = socket.gethostname(), os.getpid()
        self._start = _process_start(self._pid)

    @property
    def on_disk(self) -> bool:
        return self.location != MEMORY

    @property
    def problem(self) -> str:
        """Why runs are not (all) being saved, in a sentence for a page or the CLI; "" when they are."""
        if self._failing and self._pending:
            n = len(self._pending)
            writes = f"{n} writes of what is being measured are" if n != 1 else "1 write of what is being measured is"
            lost = f" {self.lost} more could not be kept (memory) and are lost." if self.lost else ""
            return (f"{self._failing}. {writes} kept in memory and written when it works again; lost if this program "
                    f"stops first.{lost}")
        return f"{self._failing}." if self._failing else self._opened

    @property
    def failing(self) -> str:
        """Why the database fails now, and what to do ("" when it works)."""
        return self._failing

    @property
    def unsaved(self) -> int:
        """How many writes (a run begun, a round, its end) wait in memory for the database, or were lost."""
        return len(self._pending) + self.lost

    # -- opening --------------------------------------------------------------------------------
    @classmethod
    def memory(cls, problem: str = "") -> RunStore:
        conn = sqlite3.connect(MEMORY, check_same_thread=False, isolation_level=None)
        conn.execute("PRAGMA foreign_keys = ON")
        db = SQLite(conn, MEMORY)
        migrate(db)
        return cls(db, problem)

    @classmethod
    def open(cls, location: str) -> RunStore:
        """Open (or create) the store at ``location``; raise `StoreError` without touching a file it cannot use.

        A PostgreSQL server that does not answer yet is not refused: the store says so (`problem`) and
        keeps writes in memory until it answers.
        """
        if location == MEMORY:
            return cls.memory()
        if is_url(location):
            return cls._server(location)
        path = Path(location).expanduser()
        where = f"The run store {path}"
        exists = path.exists()
        if not exists:
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise StoreError(f"{where} cannot be created ({exc.strerror or exc}): is the disk read-only? "
                                 f"Set {ENV} to a writable file, or to {MEMORY} to keep runs in memory only.") from exc
        if exists and not os.access(path, os.R_OK):
            raise StoreError(f"{where} cannot be read (permission denied). Set {ENV} to another file.")
        if exists and not (os.access(path, os.W_OK) and os.access(path.parent, os.W_OK)):  # WAL writes beside it
            raise StoreError(f"{where} is on a read-only disk or not writable. It was left as it is; "
                             f"set {ENV} to a writable file, or to {MEMORY} to keep runs in memory only.")
        try:
            conn = sqlite3.connect(f"{path.as_uri()}?mode={'rw' if exists else 'rwc'}", uri=True,
                                   check_same_thread=False, isolation_level=None, timeout=OPEN_TIMEOUT_MS / 1000)
        except sqlite3.Error as exc:
            raise StoreError(f"{where} cannot be opened ({exc}): is the disk read-only? "
                             f"Set {ENV} to a writable file, or to {MEMORY} to keep runs in memory only.") from exc
        db = SQLite(conn, str(path))
        try:
            cls._check(conn, db, where)
            conn.execute(f"PRAGMA busy_timeout = {WRITE_TIMEOUT_MS}")
        except BaseException:
            conn.close()
            raise
        return cls(db)

    @classmethod
    def _server(cls, url: str) -> RunStore:
        """A store on a PostgreSQL server: checked and migrated on each new connection."""
        def take_up(db: PostgreSQL) -> None:
            reason = foreign(db, shared=True)
            if reason:
                raise DatabaseError(f"The run store {db.location} is {reason}. It was left as it is; set {ENV} "
                                    "to another database", transient=False)
            migrate(db)

        if problem := url_problem(url):
            raise StoreError(f"The run store {shown(url)} {problem}. Fix {ENV}.")
        db = PostgreSQL(url, on_connect=take_up)
        store = cls(db)
        try:
            db.ping()
        except DatabaseError as exc:
            if exc.refused_login:
                db.close()
                raise StoreError(f"The run store {db.location} cannot be used: {exc}.") from exc
            if not exc.transient:
                db.close()
                raise StoreError(f"{exc}.") from exc
            store._failed(exc)
        return store

    @classmethod
    def _check(cls, conn: sqlite3.Connection, db: SQLite, where: str) -> None:
        """Refuse a file that is damaged, locked, read-only, newer or foreign (reading only); then bring it to
        this version."""
        conn.execute(f"PRAGMA busy_timeout = {OPEN_TIMEOUT_MS}")
        try:
            check = conn.execute("PRAGMA quick_check").fetchone()
            if check is None or check[0] != "ok":
                raise sqlite3.DatabaseError(str(check[0] if check else "no answer"))
            reason = foreign(db, shared=False)
            found = version(db) if reason is None else 0
        except DatabaseError as exc:
            text = str(exc)
            if "locked" in text or "busy" in text:
                raise StoreError(cls._locked(where)) from exc
            raise StoreError(f"{where} cannot be read ({text}). Set {ENV} to another file.") from exc
        except sqlite3.OperationalError as exc:
            if "locked" in str(exc) or "busy" in str(exc):
                raise StoreError(cls._locked(where)) from exc
            raise StoreError(f"{where} cannot be read ({exc}). Set {ENV} to another file.") from exc
        except sqlite3.DatabaseError as exc:
            raise StoreError(f"{where} is damaged or not a database ({exc}). It was left as it is: move it "
                             f"aside (or set {ENV} to another file) and a new store will be started.") from exc
        if reason:
            raise StoreError(f"{where} is {reason}. It was left as it is; set {ENV} to another file.")
        if found > SCHEMA_VERSION:
            raise StoreError(f"{where} was written by a newer Prefill Lab (store version {found}; this one "
                             f"reads up to {SCHEMA_VERSION}). It was left as it is: update Prefill Lab, or set "
                             f"{ENV} to another file.")
        try:
            if conn.execute("PRAGMA journal_mode").fetchone()[0] != "wal":
                conn.execute("PRAGMA journal_mode = WAL")
            conn.execute("PRAGMA synchronous = NORMAL")
            conn.execute("PRAGMA foreign_keys = ON")
            conn.execute("PRAGMA secure_delete = ON")  # a deleted run (a visitor's, after a day) is overwritten
            migrate(db)
        except (sqlite3.OperationalError, DatabaseError) as exc:
            text = str(exc)
            if "locked" in text or "busy" in text:
                raise StoreError(cls._locked(where)) from exc
            if "readonly" in text or "read-only" in text:
                raise StoreError(f"{where} is on a read-only disk or not writable. It was left as it is; "
                                 f"set {ENV} to a writable file, or to {MEMORY}.") from exc
            raise StoreError(f"{where} cannot be written ({text}). Set {ENV} to another file.") from exc

    @staticmethod
    def _locked(where: str) -> str:
        return (f"{where} is locked by another process (held longer than {OPEN_TIMEOUT_MS / 1000:.0f} s). "
                f"Close the program holding it, or set {ENV} to another file.")

    def close(self) -> None:
        with self._lock:
            self.db.close()

    # -- writing --------------------------------------------------------------------------------
    def _text(self, run_id: str, value: Any) -> str:
        text = json.dumps(value, ensure_ascii=False, default=str, separators=(",", ":"))
        return redact(text, *self._secrets.get(run_id, ()))

    def _failed(self, exc: DatabaseError) -> None:
        """Say why the database fails now, and what to do."""
        if exc.transient:
            todo = (f"Check the user name and password in {ENV}" if exc.refused_login else
                    f"Start the database server, or check {ENV}" if self.shared else
                    "Free some disk space, or close the program that holds the file")
            self._failing = f"The run store {self.location} cannot be used now ({exc}). {todo}"
        else:
            self._failing = (f"The run store {self.location} refused a write ({exc}); what was measured stays on "
                             "the page and in its downloads")

    def flush(self) -> bool:
        """Write what waits in memory, in order; True when nothing waits any more. A write the database
        refuses outright (not for a while) is dropped and said."""
        with self._lock:
            while self._pending:
                sql, params = self._pending[0]
                try:
                    self.db.execute(sql, params)
                except DatabaseError as exc:
                    if exc.transient:
                        self._failed(exc)
                        return False
                    self._failed(exc)
                    self._pending.pop(0)
                    continue
                self._pending.pop(0)
                if not self._pending:
                    self._up()
            return True

    def _wait(self, sql: str, params: Sequence[Any]) -> None:
        """Keep a write for later, up to `MAX_WAITING` (then it is lost and counted: memory is not endless)."""
        if len(self._pending) < MAX_WAITING:
            self._pending.append((sql, tuple(params)))
        else:
            self.lost += 1

    def _up(self) -> None:
        """The database works (nothing waits): no problem to say; the first time, `when_up`."""
        self._failing = ""
        hook, self.when_up = self.when_up, None
        if hook is not None:
            hook()

    def _write(self, sql: str, params: Sequence[Any], keep: bool = True) -> int:
        """One statement in its own transaction, and the rows it changed (0 when it failed: `problem` says why).

        ``keep``: a run's own writes (begun, a round, ended) wait in memory while the database cannot take
        them, and go in first, in order, when it can; a rename or a delete just fails and says so."""
        with self._lock:
            if self._pending and not self.flush():
                if keep:
                    self._wait(sql, params)
                return 0
            try:
                changed = self.db.execute(sql, params).rowcount
            except DatabaseError as exc:
                if exc.transient and keep:
                    self._wait(sql, params)
                self._failed(exc)
                return 0
            if not self._pending:
                self._up()
            return changed

    def _read(self, sql: str, params: Sequence[Any]) -> list[tuple[Any, ...]]:
        """Rows, or none when the database cannot answer (`problem` says why)."""
        with self._lock:
            if self._pending:
                self.flush()
            try:
                rows = self.db.execute(sql, params).rows
            except DatabaseError as exc:
                self._failed(exc)
                return []
            if not self._pending:
                self._up()
            return rows

    def begin(self, experiment: str, settings: dict[str, Any], *, label: str, machine: dict[str, Any] | None = None,
              owner: str = "", source: str = MEASURED, secrets: Iterable[str | None] = (),
              run_id: str | None = None, started_at: float | None = None, status: str = RUNNING) -> str:
        """Record a new run and return its id. ``secrets`` (the run's keys) are masked in all it writes.
        A visitor's run (``owner``) has no author; any other has this store's `author`."""
        run_id = run_id or uuid.uuid4().hex[:12]
        self._secrets[run_id] = tuple(s for s in secrets if s)
        settings = without_keys(settings)  # any spelling (apiKey, OPENAI_API_KEY), any depth, no recursion
        if owner:
            self._purge_due()
        self._machines[run_id] = machine if machine is not None else machine_info()
        self._write(
            "INSERT INTO runs (id, experiment, label, backend, model, settings, machine, source, owner, author, status,"
            " started_at, writer_host, writer_pid, writer_start) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (run_id, experiment, redact(label, *self._secrets[run_id]), str(settings.get("backend") or ""),
             str(settings.get("model") or ""), self._text(run_id, settings),
             self._text(run_id, self._machines[run_id]), source, owner,
             "" if owner or source == REFERENCE else self.author, status,
             started_at if started_at is not None else time.time(), self._host, self._pid, self._start))
        return run_id

    def add(self, run_id: str, record: Record, seq: int | None = None) -> None:
        """Write one round (or level) as it arrives: committed before the next request goes out."""
        self._write("INSERT INTO rounds (run_id, seq, record) VALUES (?, COALESCE(?, (SELECT COUNT(*) FROM rounds "
                    "WHERE run_id = ?) + 1), ?)", (run_id, seq, run_id, self._text(run_id, compact(record))))

    def add_all(self, run_id: str, records: Sequence[Record], first: int = 1) -> None:
        """An import's rounds in one transaction (a commit per round made 100,000 rounds take 30 s), numbered
        from ``first``. While the database cannot take them they wait in memory, in order, as a run's rounds do
        (`_write`)."""
        sql = "INSERT INTO rounds (run_id, seq, record) VALUES (?, ?, ?)"
        rows = [(run_id, seq, self._text(run_id, compact(record))) for seq, record in enumerate(records, start=first)]
        with self._lock:
            if not self._pending or self.flush():
                try:
                    with self.db.transaction() as tx:
                        for row in rows:
                            tx.execute(sql, row)
                except DatabaseError as exc:
                    self._failed(exc)
                    if not exc.transient:
                        return  # refused outright: said, nothing kept (as `_write`)
                else:
                    self._up()
                    return
            for row in rows:
                self._wait(sql, row)

    def finish(self, run_id: str, status: str, summary: dict[str, Any] | None = None,
               finished_at: float | None = None, state: dict[str, Any] | None = None) -> None:
        """How the run ended (`DONE`, `STOPPED`, `FAILED`; `CUT` for an imported run that was cut), its
        ``summary`` (the conclusion) and the machine's ``state`` during it (`core.conclusions.MachineState`'s
        dict), kept as the run's ``machine["state"]``."""
        if status not in (*ENDED, CUT):
            raise ValueError(f"a run ends as one of {', '.join(ENDED)}, not {status!r}")
        machine = self._machines.pop(run_id, None)
        ended = (status, finished_at if finished_at is not None else time.time(), self._text(run_id, summary or {}))
        if state is not None and machine is not None:
            self._write("UPDATE runs SET status = ?, finished_at = ?, summary = ?, machine = ? WHERE id = ?",
                        (*ended, self._text(run_id, {**machine, "state": state}), run_id))
        else:
            self._write("UPDATE runs SET status = ?, finished_at = ?, summary = ? WHERE id = ?", (*ended, run_id))
        self._secrets.pop(run_id, None)

    def rename(self, run_id: str, label: str, owner: str | None = None) -> bool:
        """Give a run a new label; False when it is not there or not the caller's (`_owned`)."""
        clause, params = self._owned(owner)
        return self._write(f"UPDATE runs SET label = ? WHERE id = ?{clause}", (label, run_id, *params), keep=False) > 0

    def delete(self, run_id: str, owner: str | None = None) -> bool:
        """Delete a run and its rounds; False when it is not there or not the caller's (`_owned`)."""
        clause, params = self._owned(owner)
        return self._write(f"DELETE FROM runs WHERE id = ?{clause}", (run_id, *params), keep=False) > 0

    def purge_visitors(self, now: float | None = None) -> int:
        """Delete hosted visitors' runs older than a day (`VISITOR_KEEP_S`); local runs (owner '') stay."""
        self._purged_at = time.monotonic()
        cutoff = (now if now is not None else time.time()) - VISITOR_KEEP_S
        return self._write("DELETE FROM runs WHERE owner != '' AND started_at < ?", (cutoff,), keep=False)

    def _purge_due(self) -> None:
        """Purge at most every `PURGE_EVERY_S`: a write on every visitor's page view serialised a crowd's arrival
        (BENCHMARKS.md, "Opening the hosted demo"). Reads hide expired runs on their own (`_visible`)."""
        if time.monotonic() - self._purged_at >= PURGE_EVERY_S:
            self.purge_visitors()

    # -- reading --------------------------------------------------------------------------------
    @staticmethod
    def _visible(owner: str | None) -> tuple[str, tuple[Any, ...]]:
        """``None``: every run; a visitor id: their runs of the last day (`VISITOR_KEEP_S`) and the shipped ones."""
        if owner is None:
            return "", ()
        return "((owner = ? AND started_at >= ?) OR source = ?)", (owner, time.time() - VISITOR_KEEP_S, REFERENCE)

    def _owned(self, owner: str | None) -> tuple[str, tuple[str, ...]]:
        """Which runs the caller may change: a visitor (``owner``) only theirs; on a team's store only the
        author's own; on a file of one's own (SQLite) every run."""
        if owner is not None:
            return " AND owner = ?", (owner,)
        if self.shared:
            return " AND author = ? AND owner = ''", (self.author,)
        return "", ()

    def mine(self, run: SavedRun) -> bool:
        """Whether this store's user may rename and delete ``run`` outside the hosted demo."""
        return not self.shared or (run.author == self.author and not run.owner)

    def _saved(self, row: tuple[Any, ...]) -> SavedRun:
        (run_id, experiment, label, backend, model, settings, machine, summary, source, owner, author, status, started,
         finished, host, pid, start, count) = row
        if status == RUNNING and not (pid == self._pid and host == self._host) and not _alive(host, pid, start):
            status = CUT
        return SavedRun(run_id, experiment, label, backend, model, json.loads(settings), json.loads(machine),
                        json.loads(summary), source, owner, status, started, finished, int(count), author)

    _COLUMNS = ("id, experiment, label, backend, model, settings, machine, summary, source, owner, author, status, "
                "started_at, finished_at, writer_host, writer_pid, writer_start, "
                "(SELECT COUNT(*) FROM rounds WHERE run_id = runs.id)")

    def runs(self, experiment: str | None = None, owner: str | None = None,
             source: str | None = None) -> list[SavedRun]:
        """Saved runs, newest first; a visitor (``owner``) sees their own and the shipped reference runs;
        ``source`` keeps only runs of that source (`MEASURED`: what was measured here)."""
        where: list[str] = []
        params: list[Any] = []
        if experiment is not None:
            where.append("experiment = ?")
            params.append(experiment)
        if source is not None:
            where.append("source = ?")
            params.append(source)
        if owner is not None:
            self._purge_due()
            clause, values = self._visible(owner)
            where.append(clause)
            params += values
        sql = f"SELECT {self._COLUMNS} FROM runs {'WHERE ' + ' AND '.join(where) if where else ''} " \
              "ORDER BY started_at DESC, id"
        return [self._saved(row) for row in self._read(sql, params)]

    def get(self, run_id: str, owner: str | None = None) -> SavedRun | None:
        """A run by its id, or by the start of its id when only one run starts so (the CLI's short ids)."""
        clause, params = self._visible(owner)
        visible = f" AND {clause}" if clause else ""
        rows = self._read(f"SELECT {self._COLUMNS} FROM runs WHERE (id = ? OR id LIKE ? ESCAPE '\\')"
                          f"{visible} ORDER BY id = ? DESC LIMIT 2",
                          (run_id, run_id.replace("_", "\\_").replace("%", "\\%") + "%", *params, run_id))
        if not rows or (len(rows) > 1 and rows[0][0] != run_id):
            return None
        return self._saved(rows[0])

    def records(self, run_id: str) -> list[Record]:
        """The run's rounds (or levels) in the order they were measured."""
        return self.records_of([run_id])[run_id]

    def records_of(self, run_ids: Sequence[str]) -> dict[str, list[Record]]:
        """Several runs' rounds, each in measured order, in one query per 500 runs (a page drawing a
        thousand ticked runs asked two thousand times); a run that is not there has none."""
        found: dict[str, list[Record]] = {run_id: [] for run_id in run_ids}
        ids = list(found)
        rows: list[tuple[Any, ...]] = []
        for at in range(0, len(ids), 500):  # under SQLite's limit on parameters
            chunk = ids[at:at + 500]
            rows += self._read(
                "SELECT rounds.run_id, runs.experiment, rounds.record FROM rounds JOIN runs ON runs.id = "
                f"rounds.run_id WHERE rounds.run_id IN ({','.join('?' * len(chunk))}) "
                "ORDER BY rounds.run_id, rounds.seq", chunk)
        for run_id, experiment, text in rows:
            found[run_id].append(record_from_dict(experiment, json.loads(text)))
        return found
