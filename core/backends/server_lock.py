"""One run at a time on a llama-server, across every process of this user (app and CLI alike).

A one-slot llama-server keeps one prompt's KV cache, and two clients at once corrupt each other's
timings (TTFT 11 s instead of 0.45 s, with no word). So each run holds a lock file per server URL
(``fcntl.flock``, released by the kernel when the process dies, so a killed run never leaves a stale
lock) under ``$XDG_RUNTIME_DIR/prefill-lab/locks`` or ``~/.cache/prefill-lab/locks``. A client that
is not this tool (another app, curl) cannot be locked out: `LlamaServerBackend.busy_slots` reads
the server's ``/slots`` so a run can warn that its timings are shared. On a system without ``fcntl`` (Windows)
the lock holds within one process only. APIs are never locked: a hosted API serves many at once.
"""

from __future__ import annotations

import hashlib
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import IO
from urllib.parse import urlsplit, urlunsplit

try:
    import fcntl
except ImportError:  # Windows: in-process locking only
    fcntl = None  # type: ignore[assignment]

POLL_S = 0.05
_local: dict[str, threading.Lock] = {}  # the same lock inside one process, where there is no fcntl
_local_guard = threading.Lock()


def lock_dir() -> Path:
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    base = Path(runtime) if runtime and Path(runtime).is_dir() else Path.home() / ".cache"
    return base / "prefill-lab" / "locks"


LOOPBACK = ("localhost", "127.0.0.1", "::1", "0.0.0.0")  # noqa: S104 - names of this machine, never bound here


def normalize(url: str) -> str:
    """One key per server: ``http://127.0.0.1:8080/v1/``, ``http://localhost:8080`` and ``http://[::1]:8080``
    are the same (two keys let two runs share one server unserialized)."""
    url = url.strip().rstrip("/").lower()
    url = url[: -len("/v1")] if url.endswith("/v1") else url
    parts = urlsplit(url)
    try:
        port = parts.port or {"http": 80, "https": 443}.get(parts.scheme)
    except ValueError:  # not a port: keep the URL as given
        return url
    host = parts.hostname or ""
    if host in LOOPBACK or host.startswith("127.") or host.endswith(".localhost"):
        host = "127.0.0.1"
    elif ":" in host:
        host = f"[{host}]"
    return urlunsplit((parts.scheme, f"{host}:{port}" if port else host, parts.path, parts.query, ""))


class ServerLock:
    """``acquire`` waits for the server (giving up when ``cancel`` is set), ``release`` frees it.

    Each acquisition opens its own file: flock locks belong to an open file, so two threads of one
    process exclude each other exactly as two processes do.
    """

    def __init__(self, url: str, directory: Path | None = None) -> None:
        self.url = normalize(url)
        self.path = (directory or lock_dir()) / f"{hashlib.sha256(self.url.encode()).hexdigest()[:16]}.lock"
        self._file: IO[str] | None = None
        self._thread_lock: threading.Lock | None = None

    def holder(self) -> str:
        """Who holds the lock, as its holder wrote it (``pid 1234: <url>``), or "" when unknown."""
        try:
            return self.path.read_text().strip()
        except OSError:
            return ""

    def _try(self) -> bool:
        if fcntl is None:
            with _local_guard:
                lock = _local.setdefault(self.url, threading.Lock())
            if lock.acquire(blocking=False):
                self._thread_lock = lock
                return True
            return False
        self.path.parent.mkdir(parents=True, exist_ok=True)
        handle = open(self.path, "a+")  # noqa: SIM115 - held open while the lock is held
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            handle.close()
            return False
        handle.truncate(0)
        handle.write(f"pid {os.getpid()}: {self.url}\n")
        handle.flush()
        self._file = handle
        return True

    def acquire(self, cancel: threading.Event | None = None, on_wait: Callable[[str], None] | None = None,
                timeout: float | None = None) -> bool:
        """Wait until this server is free; False when ``cancel`` was set or ``timeout`` seconds passed first.
        ``on_wait`` hears once who holds it, when someone does."""
        told = False
        give_up = None if timeout is None else time.monotonic() + timeout
        while not self._try():
            if not told and on_wait is not None:
                on_wait(self.holder())
                told = True
            if give_up is not None and time.monotonic() >= give_up:
                return False
            if cancel is not None and cancel.wait(POLL_S):
                return False
            if cancel is None:
                time.sleep(POLL_S)
        return True

    def release(self) -> None:
        if self._file is not None:
            self._file.close()  # closing the file releases the flock
            self._file = None
        if self._thread_lock is not None:
            self._thread_lock.release()
            self._thread_lock = None

    def __enter__(self) -> ServerLock:
        self.acquire()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.release()

