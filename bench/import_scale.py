"""Importing a large export: time and peak memory against rounds, 2,500 to 880,000 (goals: linear time,
100,000 rounds under 10 s; peak memory flat, independent of the file's size).

Each size is one experiment 3 export with every round's fields filled (`bench.store_scale.full_round`),
written by the app's own export code (`core.export.to_json`, as `python -m core runs export` writes it:
indented JSON) to a file, and imported by ``python -m core runs import FILE`` into a fresh file store, each
import in a fresh Python process: wall and CPU seconds of the import, and the process's peak resident
memory (VmHWM) against its memory once Prefill Lab is loaded (the import's own share). With ``BEFORE``
naming a checkout of an older commit its CLI is measured on the same files too.

Before the first fix the line-number lookup counted newlines from the start of the file once per round:
2,500 / 5,000 / 10,000 / 19,000 rounds took 1.3 / 2.4 / 6.7 / 20 s and 100,000 did not finish in 300 s.
Before the second the file was read whole (its text, then every round parsed at once): a 600 MB export took
1.35 GB in the issue's probe, and this benchmark's 602.6 MB one (every field filled) 2,608 MB at its peak.
Linear means CPU seconds per 1,000 rounds stay flat as the file grows; flat memory means the import's own
peak does not grow with it.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from bench.common import finish, spread, table
from bench.store_scale import full_round
from core.experiments.prefix_cache import ID as CACHE
from core.export import to_json

SIZES = tuple(int(n) for n in os.environ.get("SIZES", "2500,10000,100000,880000").split(","))
REPEATS = int(os.environ.get("REPEATS", "3"))
BEFORE = os.environ.get("BEFORE")
ROOT = Path(__file__).resolve().parents[1]
_KB = "int(re.search(r'{}:\\s+(\\d+)', open('/proc/self/status').read()).group(1))"
CHILD = f"""
import re, sys, time
from core.cli.main import main
loaded = {_KB.format("VmRSS")}
start, cpu = time.perf_counter(), time.process_time()
rc = main(["runs", "import", sys.argv[1]])
print("measured", time.perf_counter() - start, time.process_time() - cpu, {_KB.format("VmHWM")}, loaded, rc,
      file=sys.stderr)
"""


def export_file(rounds: int, folder: Path) -> Path:
    """An export of ``rounds`` rounds as the app's export code writes it, in a file."""
    records = [full_round(n) for n in range(rounds)]
    run = {"format": 1, "experiment": CACHE, "label": f"{rounds} rounds", "status": "done",
           "started_at": 1.7e9, "finished_at": 1.7e9 + rounds}
    path = folder / f"export-{rounds}.json"
    path.write_text(to_json({"backend": "local", "model": "bench"}, {"rounds": records}, run=run), encoding="utf-8")
    return path


def imported(path: Path, root: Path, store: Path) -> tuple[float, float, float, float]:
    """Wall and CPU seconds of one import in a fresh process of the checkout at ``root``, its peak memory and
    its memory before the import (MB)."""
    proc = subprocess.run([sys.executable, "-c", CHILD, str(path)], capture_output=True, text=True, timeout=1800,
                          cwd=root, env={**os.environ, "PREFILL_LAB_DB": str(store), "PYTHONPATH": str(root)})
    found = re.search(r"measured (\S+) (\S+) (\d+) (\d+) (\d+)", proc.stderr)
    assert found and found.group(5) == "0", proc.stderr[-3000:]
    return float(found.group(1)), float(found.group(2)), int(found.group(3)) / 1024, int(found.group(4)) / 1024


def main() -> dict[str, Any]:
    sides = [("now", ROOT)] + ([("before", Path(BEFORE))] if BEFORE else [])
    results: dict[str, dict[str, Any]] = {side: {} for side, _ in sides}
    with tempfile.TemporaryDirectory(prefix="prefill-lab-bench-") as tmp:
        for rounds in SIZES:
            path = export_file(rounds, Path(tmp))
            for side, root in sides:
                runs = [imported(path, root, Path(tmp) / f"{side}-{rounds}-{n}.sqlite") for n in range(REPEATS)]
                results[side][str(rounds)] = {
                    "mb": round(path.stat().st_size / 1e6, 1), "import_s": spread([r[0] for r in runs]),
                    "import_cpu_s": spread([r[1] for r in runs]), "peak_mb": spread([r[2] for r in runs]),
                    "own_peak_mb": spread([r[2] - r[3] for r in runs])}
                print(side, rounds, results[side][str(rounds)], f"load {os.getloadavg()[0]:.1f}", flush=True)
            path.unlink()
    print(table([(f"{side}: {int(n):>7} rounds, {r['mb']:6.1f} MB: {what}", r[key]) for side in results
                 for n, r in results[side].items() for what, key in (("CPU s", "import_cpu_s"), ("wall s", "import_s"),
                                                                      ("peak MB", "peak_mb"),
                                                                      ("own peak MB", "own_peak_mb"))], "s / MB"))
    now = results["now"]
    # linear: CPU seconds per 1,000 rounds flat (wall seconds on this shared machine swing 2x between repeats)
    per_thousand = {k: round(v["import_cpu_s"]["median"] / int(k) * 1000, 3) for k, v in now.items()}
    own = {k: v["own_peak_mb"]["median"] for k, v in now.items()}
    largest, hundred = str(max(SIZES)), now.get("100000", now[str(max(SIZES))])
    load = os.getloadavg()[0]
    key = {"import_s_median": {k: v["import_s"]["median"] for k, v in now.items()},
           "import_cpu_s_median": {k: v["import_cpu_s"]["median"] for k, v in now.items()},
           "peak_mb_median": {k: v["peak_mb"]["median"] for k, v in now.items()}, "own_peak_mb_median": own,
           "s_per_1000_rounds": per_thousand, "load_average": round(load, 1),
           "goal_met": hundred["import_s"]["median"] < 10
           and max(per_thousand.values()) < 2 * min(per_thousand.values())
           and max(own.values()) < 2 * min(own.values()) + 20}
    if BEFORE:
        key["before_peak_mb_median"] = {k: v["peak_mb"]["median"] for k, v in results["before"].items()}
    return finish("import_scale", {"sizes": list(SIZES), "repeats": REPEATS, "results": results}, key,
                  f"{largest} rounds ({now[largest]['mb']} MB) imported with a peak of "
                  f"{now[largest]['peak_mb']['median']:.0f} MB ({own[largest]:.0f} MB of it the import's; "
                  f"{min(own.values()):.0f} MB at {SIZES[0]:,} rounds); "
                  f"100,000 rounds in {hundred['import_s']['median']:.2f} s (goal < 10 s); "
                  f"{min(per_thousand.values()):.3f}-{max(per_thousand.values()):.3f} CPU s per 1,000 rounds (linear: "
                  f"within 2x; load average {load:.1f} on {os.cpu_count()} cores)")
