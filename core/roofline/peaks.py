"""A machine's two roofs: its compute peak (FLOP/s) and its memory bandwidth (bytes/s).

`probe` measures them here in a few seconds with numpy, which comes with pandas:

- compute: a float32 matrix multiply (``a @ b``, 2·n³ FLOPs) run by numpy's BLAS on all its threads,
  best of the repeats that fit in about a second;
- bandwidth: every core sums its own slice of one float64 array 8x the last-level cache (at least
  256 MiB), all at once (numpy releases the GIL inside the reduction), best pass. The array is
  bounded by the memory: 1 GiB at most (a VM may report a 480 MiB "cache": 8x is 3.8 GB), and a
  quarter of the memory available now (`working_set_size`); its size says what was chosen and why.

Both are lower bounds of the true peaks (a hand-tuned kernel does better), which is why an MBU
above 100 % means the probe undershot, not a faster-than-memory server. The result is cached per
machine (CPU, core count, numpy and BLAS) in ``<cache>/roofline.json`` and rerun on demand.
Accelerators elsewhere (an API's GPU) come from `core.roofline.hardware`'s cited table instead.
"""

from __future__ import annotations

import json
import math
import os
import re
import threading
import time
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np

from core.engine.cpu import cache_dir, cores, cpu_key, cpu_model, sysctl
from core.engine.meter import CpuMeter
from core.words import ContentWords, Words

PROBE = "probe"
MATMUL_N = 2048
MIN_WORKING_SET = 256 << 20
MAX_WORKING_SET = 1 << 30  # past 2x any real last-level cache; a bigger array measures nothing more
FLOOR_WORKING_SET = 16 << 20  # the least it takes, however little memory is free
CACHE_FILE = "roofline.json"


@dataclass(frozen=True)
class Ceiling:
    """One roof and how it was obtained: the kernel, its size, threads and library, or a datasheet."""

    value: float  # FLOP/s or bytes/s
    kernel: str
    size: str = ""
    threads: int | None = None
    library: str = ""
    source: str = PROBE  # PROBE, or the URL of the datasheet the figure was read from

    def describe(self, words: Words | None = None) -> str:
        """How it was obtained, in English, or in the language of ``words`` (`method_in`)."""
        parts = [self.kernel, self.size, f"{self.threads} threads" if self.threads else "", self.library]
        said = ", ".join(p for p in parts if p)
        return said if words is None else method_in(said, words)


def method_in(text: str, words: Words) -> str:
    """A ceiling's method (English, as this module writes it and a cache or a run keeps it) in the language of
    ``words``: each phrase of ``[roofline_method]`` found in it, its numbers kept."""
    english: dict[str, str] = ContentWords("en").raw("roofline_method")
    for key, template in sorted(english.items(), key=lambda item: -len(item[1])):
        pattern = re.sub(r"\\\{(\w+)\\\}", lambda m: f"(?P<{m.group(1)}>\\d+(?:[,.]\\d+)*)", re.escape(template))

        def said(found: re.Match[str], key: str = key) -> str:
            return words(f"roofline_method.{key}", **found.groupdict())

        text = re.sub(pattern, said, text)
    return text


@dataclass(frozen=True)
class Roof:
    """A machine's ceilings; ``compute`` is None where no trustworthy FLOP/s figure exists (then no MFU)."""

    machine: str
    memory: Ceiling
    compute: Ceiling | None
    as_of: str  # ISO date (time for a probe) the figures were measured or read
    seconds: float | None = None  # how long the probe took
    notes: dict[str, Any] = field(default_factory=dict)

    @property
    def flops(self) -> float | None:
        return self.compute.value if self.compute else None

    @property
    def bandwidth(self) -> float:
        return self.memory.value

    @property
    def ridge(self) -> float | None:
        """FLOP per byte where the two roofs meet: below it a phase is bandwidth-bound."""
        return self.flops / self.bandwidth if self.flops else None

    def attainable(self, intensity: float) -> float:
        """The roofline: min(peak FLOP/s, bandwidth x intensity); bandwidth x intensity when no peak is known."""
        by_memory = self.bandwidth * intensity
        return min(self.flops, by_memory) if self.flops else by_memory

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "ridge_flop_per_byte": self.ridge}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Roof:
        compute = data.get("compute")
        return cls(machine=str(data["machine"]), memory=Ceiling(**data["memory"]),
                   compute=Ceiling(**compute) if compute else None, as_of=str(data["as_of"]),
                   seconds=data.get("seconds"), notes=dict(data.get("notes") or {}))


# --- this machine -------------------------------------------------------------------------------------

CACHE_SYSFS = Path("/sys/devices/system/cpu/cpu0/cache")  # Linux
CACHE_SYSCTLS = ("hw.l3cachesize", "hw.perflevel0.l2cachesize", "hw.l2cachesize")  # macOS (Apple Silicon has no L3)


def last_level_cache() -> int | None:
    """The largest cache's size in bytes: from sysfs on Linux, ``sysctl`` on macOS; None elsewhere (Windows), where
    the bandwidth probe's working set is its floor, `MIN_WORKING_SET`, which exceeds any desktop CPU's cache."""
    sizes = []
    for entry in CACHE_SYSFS.glob("index*/size"):
        match = re.fullmatch(r"(\d+)([KMG]?)", entry.read_text().strip())
        if match:
            sizes.append(int(match.group(1)) << {"": 0, "K": 10, "M": 20, "G": 30}[match.group(2)])
    sizes += [int(value) for value in map(sysctl, CACHE_SYSCTLS) if value.isdigit()]
    return max(sizes) if sizes else None


def available_memory() -> int | None:
    """The memory available now in bytes (Linux's ``MemAvailable``, else free pages); None when unknown."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) << 10
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def working_set_size(llc: int | None, available: int | None) -> tuple[int, str]:
    """The bandwidth probe's array in bytes, and why that size: 8x the last-level cache (at least
    `MIN_WORKING_SET`), at most `MAX_WORKING_SET` and a quarter of the memory available."""
    wanted = max(MIN_WORKING_SET, 8 * (llc or 0))
    reason = (f"8x the {llc >> 20} MiB LLC" if llc and 8 * llc > MIN_WORKING_SET else
              f"the {MIN_WORKING_SET >> 20} MiB least, over 8x the {llc >> 20} MiB LLC" if llc else
              f"the {MIN_WORKING_SET >> 20} MiB least, no LLC size known")
    if wanted > MAX_WORKING_SET:
        wanted, reason = MAX_WORKING_SET, f"{reason}, capped at {MAX_WORKING_SET >> 20} MiB"
    if available is not None and wanted > available // 4:
        wanted = max(FLOOR_WORKING_SET, available // 4)
        reason = f"{reason}, capped at a quarter of the {available >> 20} MiB available"
    return wanted, reason


def blas() -> tuple[str, int | None]:
    """The BLAS numpy's matmul runs, with the kernel it picked for this CPU, and its threads.

    From threadpoolctl when installed (what is loaded, which core type OpenBLAS chose), else numpy's
    build configuration (what it was built with)."""
    try:
        from threadpoolctl import threadpool_info
    except ImportError:
        threadpool_info = None
    if threadpool_info is not None:
        for pool in threadpool_info():
            if pool.get("user_api") == "blas":
                arch = f" ({pool['architecture']} kernel)" if pool.get("architecture") else ""
                return f"{pool.get('internal_api')} {pool.get('version')}{arch}", pool.get("num_threads")
    config: Any = np.show_config(mode="dicts")
    lib = config.get("Build Dependencies", {}).get("blas", {})
    return f"{lib.get('name', 'unknown BLAS')} {lib.get('version', '')}".strip(), None


def _best_of(action: Any, budget_s: float, at_least: int) -> tuple[float, int]:
    """The shortest of ``action``'s timings, repeated for ``budget_s`` and at least ``at_least`` times."""
    best, runs, start = float("inf"), 0, time.perf_counter()
    while runs < at_least or time.perf_counter() - start < budget_s:
        began = time.perf_counter()
        action()
        best = min(best, time.perf_counter() - began)
        runs += 1
    return best, runs


def measure_compute(n: int = MATMUL_N, budget_s: float = 1.0) -> Ceiling:
    """Float32 ``a @ b`` at n x n: 2·n³ FLOPs per product, best time."""
    rng = np.random.default_rng(0)
    a = rng.random((n, n), dtype=np.float32)
    b = rng.random((n, n), dtype=np.float32)
    a @ b  # warm-up: threads started, pages touched
    best, runs = _best_of(lambda: a @ b, budget_s, 3)
    library, threads = blas()
    return Ceiling(2.0 * n**3 / best, "numpy float32 matmul", f"{n}x{n}, best of {runs}", threads, library)


def measure_bandwidth(working_set: int | None = None, threads: int | None = None, budget_s: float = 1.0) -> Ceiling:
    """Every thread sums its slice of one float64 array at once; bytes read / the slowest thread's time."""
    llc = last_level_cache()
    size, chosen = (working_set, "asked for") if working_set else working_set_size(llc, available_memory())
    workers = threads or cores()
    data = np.ones(size // 8, dtype=np.float64)  # written once: every page is backed before timing
    slices = np.array_split(data, workers)
    start, done = threading.Barrier(workers + 1), threading.Barrier(workers + 1)
    stop = threading.Event()
    sink = [0.0] * workers

    def reader(index: int) -> None:
        while True:
            start.wait()
            if stop.is_set():
                return
            sink[index] = float(slices[index].sum())
            done.wait()

    pool = [threading.Thread(target=reader, args=(i,), daemon=True) for i in range(workers)]
    for thread in pool:
        thread.start()

    def one_pass() -> None:
        start.wait()
        done.wait()

    try:
        one_pass()  # warm-up
        best, runs = _best_of(one_pass, budget_s, 3)
    finally:
        stop.set()
        start.wait()
        for thread in pool:
            thread.join()
    return Ceiling(data.nbytes / best, "numpy float64 sum, one slice per thread",
                   f"{data.nbytes >> 20} MiB ({chosen}), best of {runs}", workers, f"numpy {np.__version__}")


def probe(matmul_n: int = MATMUL_N, working_set: int | None = None, budget_s: float = 1.0) -> Roof:
    """Measure this machine's roofs now (a few seconds at the default sizes).

    ``notes["cpu_share"]`` is the probe's share of the CPU time used meanwhile (Linux): other programs
    lower both figures, and the page then says to measure again on an idle machine."""
    meter = CpuMeter(os.getpid())
    meter.start()
    began = time.perf_counter()
    memory = measure_bandwidth(working_set, budget_s=budget_s)
    compute = measure_compute(matmul_n, budget_s=budget_s)
    seconds = round(time.perf_counter() - began, 2)
    share = meter.stop()
    notes: dict[str, Any] = {"machine_key": machine_key()}
    if share is not None:
        notes.update(cpu_share=round(share.server_share, 3), busy=share.busy)
    return Roof(machine=f"{cpu_model()}, {cores()} cores", memory=memory, compute=compute,
                as_of=datetime.now(timezone.utc).isoformat(timespec="seconds"), seconds=seconds, notes=notes)


def machine_key() -> str:
    """What the cached figures depend on: the CPU, its cores here, numpy and its BLAS."""
    return f"{cpu_key()}|{cpu_model()}|{cores()}|numpy {np.__version__}|{blas()[0]}"


def _store() -> Path:
    return cache_dir() / CACHE_FILE


def _known() -> dict[str, Any]:
    """Every machine's cached figures; {} when the file is missing, unreadable or not a JSON object."""
    try:
        known = json.loads(_store().read_text())
    except (OSError, ValueError, RecursionError):
        return {}
    return known if isinstance(known, dict) else {}


def _invalid(roof: Roof) -> str:
    """Why cached figures cannot be this machine's roofs ("" when they can): a roof is a positive, finite rate."""
    for name, ceiling in (("bandwidth", roof.memory), ("compute", roof.compute)):
        value = ceiling.value if ceiling else 1.0
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value <= 0:
            return f"its {name} {value!r} is not a positive number"
    return ""


def cache_problem() -> str:
    """A sentence when the cache holds figures for this machine that cannot be used ("" otherwise): they are
    treated as absent, and the probe measures again."""
    if _store().exists() and not _store().is_file():
        return (f"{_store()} is a folder, not a file of figures: this machine is measured each time until it is "
                "moved aside.")
    entry = _known().get(machine_key())
    if entry is None and _store().exists() and not _known():
        return f"{_store()} is not a JSON object of figures; it is ignored and the machine is measured again."
    if entry is None:
        return ""
    try:
        problem = _invalid(Roof.from_dict(entry))
    except (KeyError, TypeError, ValueError, AttributeError):
        problem = "its figures are incomplete"
    return f"{_store()} holds figures for this machine that cannot be used ({problem}); it is measured again." \
        if problem else ""


def cached() -> Roof | None:
    """The probe measured earlier on this machine, None when it has not run here (or its figures are unusable:
    `cache_problem` says why)."""
    try:
        roof = Roof.from_dict(_known()[machine_key()])
    except (KeyError, TypeError, ValueError, AttributeError):
        return None
    return None if _invalid(roof) else roof


def save(roof: Roof) -> None:
    """Keep ``roof`` as this machine's figures (`cached` reads them back); a cache that is not a JSON object
    (``[]``, ``null``) is replaced."""
    known = _known()
    known[machine_key()] = roof.to_dict()
    try:
        _store().parent.mkdir(parents=True, exist_ok=True)
        _store().write_text(json.dumps(known, indent=1))
    except OSError:
        pass  # a folder in its place, a read-only disk: the figures serve this time (`cache_problem` says why)


def machine_roof(rerun: bool = False) -> Roof:
    """This machine's roofs: cached, else (or with ``rerun``) measured now and cached."""
    roof = None if rerun else cached()
    if roof is None:
        roof = probe()
        save(roof)
    return roof
