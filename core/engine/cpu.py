"""What this processor can run: its instruction-set flags, and what a llama.cpp build needs.

A prebuilt llama-server that uses an instruction the CPU lacks dies with SIGILL while loading the
model. `needed_flags` tells what a build needs without running it, by disassembling its
``libggml-cpu*.so`` (or the binary itself when it is statically linked) with ``objdump``; the
answer is cached per file (path, size, mtime) because disassembly takes a few seconds.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import re
import shutil
import subprocess
from functools import lru_cache
from pathlib import Path

# Instruction patterns in objdump's output and the /proc/cpuinfo flag each one needs.
_PATTERNS: dict[str, re.Pattern[str]] = {
    "avx_vnni": re.compile(r"\{vex\}\s+vpdpbu?s"),
    "avx512_vnni": re.compile(r"(?<!\{vex\} )\bvpdpbu?sds?\b[^\n]*%[xyz]mm\d+\{|vpdpbu?sds?\s[^\n]*%zmm"),
    "avx512f": re.compile(r"%zmm\d"),
    "avx2": re.compile(r"\bvpbroadcast|\bvpermq\b|\bvpmaddubsw\s[^\n]*%ymm"),
    "fma": re.compile(r"\bvfn?madd\d{3}"),
    "f16c": re.compile(r"\bvcvtph2ps\b|\bvcvtps2ph\b"),
}
CPUINFO = Path("/proc/cpuinfo")


def cache_dir() -> Path:
    """``$XDG_CACHE_HOME/prefill-lab`` or ``~/.cache/prefill-lab``: outside the checkout, shared by clones."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "prefill-lab"


def cpu_model() -> str:
    """The processor's name: ``model name`` from /proc/cpuinfo (Linux), ``machdep.cpu.brand_string`` (macOS),
    else platform's word."""
    try:
        match = re.search(r"^(?:model name|Hardware|Model)\s*:\s*(.+)$", CPUINFO.read_text(), re.MULTILINE)
        if match:
            return " ".join(match.group(1).split())
    except OSError:
        pass
    return sysctl("machdep.cpu.brand_string") or platform.processor() or platform.machine() or "unknown CPU"


def sysctl(name: str) -> str:
    """A macOS ``sysctl`` value (what Linux keeps in /proc and /sys); "" elsewhere or when it has none."""
    if platform.system() != "Darwin":
        return ""
    try:
        out = subprocess.run(["sysctl", "-n", name], capture_output=True, text=True, timeout=2, check=False)
    except (OSError, subprocess.SubprocessError):
        return ""
    return out.stdout.strip() if out.returncode == 0 else ""


def cores() -> int:
    """The cores this process may run on (the affinity mask, else the CPU count)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # macOS, Windows
        return os.cpu_count() or 1


@lru_cache(maxsize=1)
def cpu_flags() -> frozenset[str]:
    """This CPU's flags (x86 ``flags``, Arm ``Features``), empty where /proc/cpuinfo does not exist."""
    try:
        text = CPUINFO.read_text()
    except OSError:
        return frozenset()
    match = re.search(r"^(?:flags|Features)\s*:\s*(.*)$", text, re.MULTILINE)
    return frozenset(match.group(1).split()) if match else frozenset()


def cpu_key() -> str:
    """A short name for this CPU's instruction set: native builds are cached under it."""
    digest = hashlib.sha256(" ".join(sorted(cpu_flags())).encode()).hexdigest()[:10]
    return f"{platform.machine()}-{digest}"


def _libraries(binary: Path) -> list[Path]:
    """The files holding the CPU kernels: libggml-cpu*.so next to the binary, else the binary."""
    found = sorted(binary.resolve().parent.glob("libggml-cpu*.so")) or sorted(binary.parent.glob("libggml-cpu*.so"))
    return found or [binary.resolve()]


def _picks_at_run_time(libraries: list[Path]) -> bool:
    """A build with one ``libggml-cpu-<variant>.so`` per CPU family loads the one this CPU runs."""
    return len([lib for lib in libraries if lib.name.startswith("libggml-cpu-")]) > 1


def _scan(library: Path) -> set[str] | None:
    """The flags one file's machine code needs, read from ``objdump -d``; None when objdump cannot read it
    (a script, a file of another architecture): unknown, not "needs nothing"."""
    proc = subprocess.run(["objdump", "-d", "--no-show-raw-insn", str(library)], capture_output=True, text=True,
                          timeout=300, check=False)
    if proc.returncode != 0:
        return None
    return {flag for flag, pattern in _PATTERNS.items() if pattern.search(proc.stdout)}


def needed_flags(binary: Path) -> frozenset[str] | None:
    """The CPU flags a llama-server build needs (empty when ggml picks a variant at run time); None when
    it cannot be told (no objdump, not x86)."""
    if platform.machine() not in ("x86_64", "AMD64") or shutil.which("objdump") is None:
        return None
    files = _libraries(binary)
    if _picks_at_run_time(files):
        return frozenset()
    key = "|".join(f"{f}:{f.stat().st_size}:{f.stat().st_mtime_ns}" for f in files)
    store = cache_dir() / "needed-flags.json"
    try:
        known = json.loads(store.read_text())
    except (OSError, ValueError):
        known = {}
    if key not in known:
        flags: set[str] = set()
        for library in files:
            found = _scan(library)
            if found is None:
                return None  # not cached: a later look (another objdump) may tell
            flags |= found
        known[key] = sorted(flags)
        store.parent.mkdir(parents=True, exist_ok=True)
        store.write_text(json.dumps(known, indent=1))
    return frozenset(known[key])


def missing_flags(binary: Path) -> list[str]:
    """Flags the build needs that this CPU lacks; empty when all are present or unknown."""
    needed = needed_flags(binary)
    have = cpu_flags()
    if needed is None or not have:
        return []
    return sorted(needed - have)
