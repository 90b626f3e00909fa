"""Importing a large export: time against rounds, 2,500 to 100,000 (goal: linear; 100,000 under 10 s).

Each size is one experiment 3 export with every round's fields filled (`bench.store_scale.full_round`), as
`python -m core runs export` writes it (indented JSON), imported into a fresh file store
(`core.store.import_export`: checked whole first, then written). Before the fix the line-number lookup
counted newlines from the start of the file once per round: 2,500 / 5,000 / 10,000 / 19,000 rounds took
1.3 / 2.4 / 6.7 / 20 s and 100,000 did not finish in 300 s. Linear means seconds per 1,000 rounds stay
flat as the file grows.
"""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.common import finish, spread, table
from bench.store_scale import full_round
from core.experiments.prefix_cache import ID as CACHE
from core.export import to_json
from core.store import RunStore, import_export, read_export

SIZES = tuple(int(n) for n in os.environ.get("SIZES", "2500,5000,10000,19000,50000,100000").split(","))
REPEATS = int(os.environ.get("REPEATS", "3"))


def export_of(rounds: int) -> str:
    records = [full_round(n) for n in range(rounds)]
    run = {"format": 1, "experiment": CACHE, "label": f"{rounds} rounds", "status": "done",
           "started_at": 1.7e9, "finished_at": 1.7e9 + rounds}
    return to_json({"backend": "local", "model": "bench"}, {"rounds": records}, run=run)


def timed(text: str, folder: Path, repeat: int) -> tuple[float, float, float]:
    """Seconds to check the file, and to check and store it (wall, then this process's CPU: the machine
    is shared, and CPU seconds say what the import costs whatever else runs)."""
    start = time.perf_counter()
    read_export(text, "big.json")
    checked = time.perf_counter() - start
    store = RunStore.open(str(folder / f"import-{len(text)}-{repeat}.sqlite"))
    start, cpu = time.perf_counter(), time.process_time()
    (run_id,) = import_export(store, text, "big.json")
    stored, cpu = time.perf_counter() - start, time.process_time() - cpu
    assert store.get(run_id) is not None and store.get(run_id).rounds > 0  # type: ignore[union-attr]
    store.close()
    return checked, stored, cpu


def main() -> dict[str, Any]:
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="prefill-lab-bench-") as tmp:
        for rounds in SIZES:
            text = export_of(rounds)
            runs = [timed(text, Path(tmp), repeat) for repeat in range(REPEATS)]
            results[str(rounds)] = {"mb": round(len(text.encode()) / 1e6, 1),
                                    "check_s": spread([r[0] for r in runs]), "import_s": spread([r[1] for r in runs]),
                                    "import_cpu_s": spread([r[2] for r in runs])}
    print(table([(f"{int(n):>7} rounds, {r['mb']:5.1f} MB: import {what}", r[key]) for n, r in results.items()
                 for what, key in (("wall", "import_s"), ("CPU", "import_cpu_s"))], "s"))
    # linear: CPU seconds per 1,000 rounds flat (wall seconds on this shared machine swing 2x between repeats)
    per_thousand = {k: round(v["import_cpu_s"]["median"] / int(k) * 1000, 3) for k, v in results.items()}
    largest = str(max(SIZES))
    load = os.getloadavg()[0]
    key = {"import_s_median": {k: v["import_s"]["median"] for k, v in results.items()},
           "import_cpu_s_median": {k: v["import_cpu_s"]["median"] for k, v in results.items()},
           "s_per_1000_rounds": per_thousand, "load_average": round(load, 1),
           "goal_met": results[largest]["import_s"]["median"] < 10
           and max(per_thousand.values()) < 2 * min(per_thousand.values())}
    return finish("import_scale", {"sizes": list(SIZES), "repeats": REPEATS, "results": results}, key,
                  f"{largest} rounds imported in {results[largest]['import_s']['median']:.2f} s (goal < 10 s); "
                  f"{min(per_thousand.values()):.3f}-{max(per_thousand.values()):.3f} CPU s per 1,000 rounds across "
                  f"{SIZES[0]:,}-{max(SIZES):,} (linear: within 2x; load average {load:.1f} on {os.cpu_count()} cores)")
