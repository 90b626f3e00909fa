"""A real PostgreSQL for the tests: a fresh cluster in a temporary folder, started once per session, stopped after.

Debian's server binaries (scripts/ensure-postgres.sh installs them; /usr/lib/postgresql/<version>/bin is
off PATH). initdb refuses root, so as root the cluster belongs to the ``postgres`` system user the
package creates. It listens on a unix socket in its folder (the superuser, trusted) and on a free
127.0.0.1 port, where the store logs in with a password (``scram-sha-256``), as a team's URL would.
Durability is off (fsync, full-page writes): nothing here needs to survive a power cut.
"""

from __future__ import annotations

import glob
import os
import pwd
import secrets
import shutil
import socket
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

ROLE = "prefill"


def _bin(name: str) -> str:
    found = shutil.which(name) or next(iter(sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"), reverse=True)), None)
    if not found:
        raise RuntimeError(f"PostgreSQL's {name} is missing: run scripts/ensure-postgres.sh (make test does).")
    return found


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class Cluster:
    """One PostgreSQL cluster of the tests' own; `url` gives a fresh database in it."""

    def __init__(self) -> None:
        # /tmp, not $TMPDIR: the postgres user must reach it, and a unix socket's path is short
        self.root = Path(tempfile.mkdtemp(prefix="prefill-pg-", dir="/tmp" if os.path.isdir("/tmp") else None))
        self.data, self.socket_dir, self.log = self.root / "data", self.root / "run", self.root / "server.log"
        self.port = _free_port()
        self.password = "pw-" + secrets.token_hex(12)
        self._as: dict[str, Any] = {}
        if os.geteuid() == 0:  # initdb refuses root: the cluster is the postgres user's
            user = pwd.getpwnam("postgres")
            self._as = {"user": user.pw_uid, "group": user.pw_gid, "extra_groups": []}
            os.chown(self.root, user.pw_uid, user.pw_gid)
        self.socket_dir.mkdir()
        if self._as:
            os.chown(self.socket_dir, self._as["user"], self._as["group"])

    def _run(self, *args: str) -> None:
        done = subprocess.run(args, capture_output=True, text=True, cwd=self.root, **self._as)
        if done.returncode != 0:
            log = self.log.read_text() if self.log.exists() else ""
            raise RuntimeError(f"{' '.join(args)} failed: {done.stderr or done.stdout}\n{log[-2000:]}")

    def init(self) -> None:
        self._run(_bin("initdb"), "-D", str(self.data), "-U", "postgres", "--auth-local=trust",
                  "--auth-host=scram-sha-256", "-E", "UTF8", "--no-locale")

    def start(self) -> None:
        options = (f"-k {self.socket_dir} -c listen_addresses=127.0.0.1 -p {self.port} -c fsync=off "
                   "-c full_page_writes=off -c synchronous_commit=off -c max_connections=200")
        self._run(_bin("pg_ctl"), "-D", str(self.data), "-o", options, "-l", str(self.log), "-w", "-t", "60", "start")

    def stop(self, mode: str = "fast") -> None:
        self._run(_bin("pg_ctl"), "-D", str(self.data), "-m", mode, "-w", "stop")

    def running(self) -> bool:
        return (self.data / "postmaster.pid").exists()

    def admin(self) -> psycopg.Connection[Any]:
        return psycopg.connect(host=str(self.socket_dir), port=self.port, user="postgres", dbname="postgres",
                               autocommit=True)

    def create_role(self) -> None:
        with self.admin() as conn:
            conn.execute(f"CREATE ROLE {ROLE} LOGIN CREATEDB PASSWORD '{self.password}'")

    def database(self) -> str:
        """A new, empty database owned by the store's role."""
        name = "t_" + uuid.uuid4().hex[:16]
        with self.admin() as conn:
            conn.execute(f"CREATE DATABASE {name} OWNER {ROLE}")
        return name

    def url(self, database: str) -> str:
        return f"postgresql://{ROLE}:{self.password}@127.0.0.1:{self.port}/{database}"

    def remove(self) -> None:
        if self.running():
            self.stop("immediate")
        shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> Cluster:
        try:
            self.init()
            self.start()
            self.create_role()
        except BaseException:
            self.remove()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.remove()


@pytest.fixture(scope="session")
def postgres() -> Iterator[Cluster]:
    """The session's PostgreSQL cluster (stopped and removed after the last test)."""
    with Cluster() as cluster:
        yield cluster
    assert not cluster.root.exists(), "the test cluster's folder outlived the session"


@pytest.fixture()
def postgres_url(postgres: Cluster) -> str:
    """A URL (with its password) to a new, empty database in the session's cluster."""
    return postgres.url(postgres.database())
