"""The cache doctor's page against its CLI on one large log: peak memory and time (goal: within 1.2x each).

The log is 1,000 append-only rounds, 42 MB (`tests.support.doctor_logs.append_only_log`). Each side runs in
a fresh Python process: ``python -m core doctor LOG`` (`CLI`), and the real app's doctor page under
Streamlit's AppTest with the log uploaded (`PAGE`; static analysis, the API backend so that no engine
starts). Peak memory is the process's own VmHWM; time is the work's wall and CPU seconds (CPU: the
machine is shared, and its load swings wall time 2x). The sides alternate, ``REPEATS`` times; with
``BEFORE`` naming a checkout of an older commit its page is measured too. Before the fix the page parsed
the log twice more for its fix step, on every upload, whether or not anything was fixable.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

from bench.common import finish, spread, table
from tests.support.doctor_logs import CLI, PAGE, ROOT, append_only_log, measured

REPEATS = int(os.environ.get("REPEATS", "2"))
BEFORE = os.environ.get("BEFORE")


def main() -> dict[str, Any]:
    sides = [("cli", CLI, ROOT), ("page", PAGE, ROOT)] + ([("page before", PAGE, Path(BEFORE))] if BEFORE else [])
    runs: dict[str, list[tuple[float, float, int, int]]] = {name: [] for name, _, _ in sides}
    with tempfile.TemporaryDirectory(prefix="prefill-lab-bench-") as tmp:
        log = append_only_log(Path(tmp) / "agent.jsonl")
        size = log.stat().st_size
        for _ in range(REPEATS):
            for name, script, root in sides:
                runs[name].append(measured(script, log, root=root))
                print(name, runs[name][-1], f"load {os.getloadavg()[0]:.1f}", flush=True)
    assert all(r[3] == 0 for results in runs.values() for r in results), runs
    stats = {name: {"wall_s": spread([r[0] for r in results]), "cpu_s": spread([r[1] for r in results]),
                    "peak_mb": spread([r[2] / 1024 for r in results])} for name, results in runs.items()}
    rows = [(f"{name}: {what}", stats[name][what]) for name in runs for what in ("peak_mb", "cpu_s", "wall_s")]
    print(table(rows, "MB / s"))

    def ratio(what: str, name: str = "page") -> float:
        return round(stats[name][what]["median"] / stats["cli"][what]["median"], 2)

    key = {"log_mb": round(size / 1e6, 1), "peak_ratio": ratio("peak_mb"), "cpu_ratio": ratio("cpu_s"),
           "wall_ratio": ratio("wall_s"), "page_peak_mb": stats["page"]["peak_mb"]["median"],
           "cli_peak_mb": stats["cli"]["peak_mb"]["median"], "load_average": round(os.getloadavg()[0], 1)}
    if BEFORE:
        key |= {"before_peak_ratio": ratio("peak_mb", "page before"), "before_cpu_ratio": ratio("cpu_s", "page before")}
    key["goal_met"] = key["peak_ratio"] <= 1.2 and key["cpu_ratio"] <= 1.2
    return finish("doctor_page", {"rounds": 1000, "repeats": REPEATS, "stats": stats}, key,
                  f"the doctor page on a {key['log_mb']} MB, 1,000-round log: peak {key['page_peak_mb']:.0f} MB vs the "
                  f"CLI's {key['cli_peak_mb']:.0f} MB ({key['peak_ratio']}x), CPU {key['cpu_ratio']}x, wall "
                  f"{key['wall_ratio']}x (goal <= 1.2x each)")
