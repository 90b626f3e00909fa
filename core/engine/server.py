"""The embedded local engine: run one llama-server child process.

Which binary and model are used, and why, is `core.engine.choice` (re-exported here).
`LocalServer` starts the binary on a free 127.0.0.1 port with ``slots`` slots (default ``-np 1``: one
KV cache, so the experiments see exactly what they reuse; more slots share one unified KV cache with
``--kv-unified``), waits for ``/health``, keeps the log in a file, and stops it with its whole process
group. The child also gets ``PR_SET_PDEATHSIG`` on Linux from a thread that lives as long as the
server, so it dies with us even if we are killed with SIGKILL. A binary that dies with SIGILL, at
start or later, is remembered and reported as a CPU-instruction problem with what to do.
"""

from __future__ import annotations

import atexit
import ctypes
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path

import httpx

from core.engine.choice import SIGILL_CODES, EngineError, cpu_message, find_model, find_server_binary, remember_sigill
from core.engine.cpu import missing_flags

__all__ = ["DEFAULT_CONTEXT", "EngineError", "LocalServer", "find_model", "find_server_binary",
           "free_port"]

DEFAULT_CONTEXT = 8192


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _die_with_parent() -> None:  # runs in the child between fork and exec
    if sys.platform.startswith("linux"):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


class LocalServer:
    """One llama-server child process on 127.0.0.1. Use `start()`/`stop()` or ``with``."""

    def __init__(self, binary: Path | None = None, model: Path | None = None, *, context: int = DEFAULT_CONTEXT,
                 port: int | None = None, threads: int | None = None, log_dir: Path | None = None,
                 startup_timeout: float = 120.0, slots: int = 1, extra_args: Sequence[str] = ()) -> None:
        self.binary = binary or find_server_binary()
        self.model = model or find_model()
        self.context = context
        self.slots = slots
        self.port = port or free_port()
        self.threads = threads
        self.extra_args = list(extra_args)  # more llama-server flags, e.g. --jinja --chat-template-file FILE
        self.startup_timeout = startup_timeout
        log_dir = Path(log_dir or tempfile.mkdtemp(prefix="prefill-lab-"))
        log_dir.mkdir(parents=True, exist_ok=True)
        self.log_path = log_dir / f"llama-server-{self.port}.log"
        self.process: subprocess.Popen[bytes] | None = None
        self._started = threading.Event()
        self._spawn_error: BaseException | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def command(self) -> list[str]:
        cmd = [str(self.binary), "-m", str(self.model), "-c", str(self.context), "-np", str(self.slots),
               "--host", "127.0.0.1", "--port", str(self.port)]
        if self.slots > 1:
            cmd.append("--kv-unified")  # the slots share one context instead of splitting it
        if self.threads:
            cmd += ["-t", str(self.threads)]
        return cmd + self.extra_args

    def _keep(self) -> None:
        """Spawn the child and wait for it, so PDEATHSIG's parent thread lives as long as it does."""
        try:
            with self.log_path.open("ab") as log:
                self.process = subprocess.Popen(self.command(), stdout=log, stderr=subprocess.STDOUT,
                                                stdin=subprocess.DEVNULL, start_new_session=True,
                                                preexec_fn=_die_with_parent)
        except OSError as exc:
            self._spawn_error = exc
            return
        finally:
            self._started.set()
        self.process.wait()

    def start(self) -> "LocalServer":
        """Start and wait until ``/health`` says ok; raise `EngineError` with the log tail otherwise
        (and without starting when the binary needs CPU flags this processor lacks)."""
        if self.running():
            return self
        missing = missing_flags(self.binary)
        if missing:
            raise EngineError(cpu_message(self.binary, missing))
        self._started.clear()
        threading.Thread(target=self._keep, name=f"llama-server-{self.port}", daemon=True).start()
        self._started.wait(10)
        if self._spawn_error is not None or self.process is None:
            raise EngineError(f"Could not start {self.binary}: {self._spawn_error}")
        atexit.register(self.stop)
        deadline = time.monotonic() + self.startup_timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise EngineError(f"{self._exit_reason('llama-server exited with code {} while starting.')}\n"
                                  f"{self.log_tail()}")
            try:
                if httpx.get(self.url + "/health", timeout=1.0).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        self.stop()
        raise EngineError(f"llama-server did not become healthy within {self.startup_timeout:.0f} s.\n"
                          f"{self.log_tail()}")

    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def crashed(self) -> str | None:
        """None while healthy or never started; otherwise why it is gone, with the log tail."""
        if self.process is None or self.process.poll() is None:
            return None
        return f"{self._exit_reason('llama-server is not running (exit code {}).')}\n{self.log_tail()}"

    def _exit_reason(self, usual: str) -> str:
        """Why the process ended: ``usual`` with its exit code, or for a SIGILL the CPU sentence (and the
        binary is remembered so the chooser skips it from now on)."""
        assert self.process is not None
        code = self.process.returncode
        if code in SIGILL_CODES:
            remember_sigill(self.binary)
            return f"{cpu_message(self.binary)} (exit code {code})"
        return usual.format(code)

    def log_tail(self, lines: int = 20) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])

    def stop(self) -> None:
        """Terminate the server's process group; kill it if it does not leave within 5 s."""
        process = self.process
        if process is None or process.poll() is not None:
            return
        try:
            os.killpg(process.pid, signal.SIGTERM)
            process.wait(5)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(5)
        except ProcessLookupError:
            pass

    def __enter__(self) -> "LocalServer":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
