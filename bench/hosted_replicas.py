"""The hosted crowd through nginx with one and two replicas on this machine: how many new sessions a second each
serves with a page p95 under 2 s, the ratio of the two, and what 1,000 and 10,000 arrivals within a minute need.

Setup as `make replicas` runs it (tests/support/replicas.py): nginx with the route cookie in front of N
``streamlit run`` replicas in hosted mode, one PostgreSQL cluster in a temporary folder as their store.
Visitors are protocol-level clients (`bench.streamlit_client`: health, WebSocket, first script run), arriving
at a steady rate for `STEP_S` seconds (open loop: an arrival does not wait for the one before), each staying
connected until the step ends, as a tab does. The rate climbs in `RATES` until the p95 of the time to a drawn
page passes 2 s or a visit fails; the last rate under it is the capacity. CPU per session is every replica's
CPU time over the steps it served divided by its sessions. The clients and nginx run on the same cores as the
replicas, so their CPU is in every wall time; the load average before each setup is recorded.
"""

from __future__ import annotations

import asyncio
import math
import os
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.common import finish
from bench.hosted_load import percentile
from bench.streamlit_client import Visitor, cpu_seconds, load_average
from tests.support.postgres import Cluster
from tests.support.replicas import Replicas

RATES = [5, 10, 15, 20, 25, 30, 35, 40, 50, 60, 70, 80]  # new sessions per second
STEP_S = 6.0
P95_GOAL_S = 2.0
HEADROOM = 0.6  # plan replicas to run at most 60 % busy: a queue at a busier server makes p95 climb fast


async def step(url: str, rate: float) -> dict[str, Any]:
    """``rate`` arrivals a second for `STEP_S` seconds; every visitor stays until the last page is drawn."""
    n = int(rate * STEP_S)
    visitors = [Visitor(url, timeout=60) for _ in range(n)]
    start = time.perf_counter()

    async def arrive(i: int, visitor: Visitor) -> Any:
        await asyncio.sleep(max(0.0, start + i / rate - time.perf_counter()))
        return await visitor.open()

    visits = await asyncio.gather(*(arrive(i, v) for i, v in enumerate(visitors)))
    await asyncio.gather(*(v.close() for v in visitors))
    drawn = [v.finished_s for v in visits if v.finished_s is not None and not v.error]
    errors = sorted({v.error for v in visits if v.error})
    return {"rate": rate, "n": n, "drawn": len(drawn), "errors": errors[:3], "page_p50_s": percentile(drawn, 0.5),
            "page_p95_s": percentile(drawn, 0.95), "page_max_s": percentile(drawn, 1.0)}


def measure(replicas: int, db_url: str, folder: Path) -> dict[str, Any]:
    env = {**os.environ, "HOME": str(folder), "PREFILL_LAB_HOSTED": "true", "PREFILL_LAB_DB": db_url}
    load = load_average()
    steps: list[dict[str, Any]] = []
    with Replicas(folder / f"replicas-{replicas}", replicas, env) as group:
        for port in group.ports:  # imports and the first script compile on every replica, as on a deploy
            asyncio.run(step(f"http://127.0.0.1:{port}", 1))
        pids = [group.pid(i) for i in range(replicas)]
        before = sum(cpu_seconds(pid) for pid in pids)
        sessions = 0
        for rate in RATES:
            row = asyncio.run(step(group.url, rate))
            sessions += row["n"]
            steps.append(row)
            print(f"  {replicas} replica(s), {rate:>3}/s: page p50 {row['page_p50_s']} s, p95 {row['page_p95_s']} s,"
                  f" {row['drawn']}/{row['n']} drawn", flush=True)
            if row["errors"] or row["page_p95_s"] is None or row["page_p95_s"] >= P95_GOAL_S:
                break
        cpu_ms = round((sum(cpu_seconds(pid) for pid in pids) - before) * 1000 / max(sessions, 1), 1)
    good = [s["rate"] for s in steps if not s["errors"] and s["page_p95_s"] is not None
            and s["page_p95_s"] < P95_GOAL_S and s["drawn"] == s["n"]]
    return {"replicas": replicas, "load_average_before": load, "steps": steps,
            "sessions_per_s": max(good, default=0), "cpu_ms_per_session": cpu_ms}


def plan(cpu_ms: float) -> list[dict[str, Any]]:
    """Cores and replicas for arrivals within a minute, from the CPU a session costs (one replica per core:
    a Streamlit process's script runs share one GIL)."""
    rows = []
    for arrivals in (1_000, 10_000):
        per_s = arrivals / 60
        cores = per_s * cpu_ms / 1000 / HEADROOM
        rows.append({"arrivals_per_minute": arrivals, "sessions_per_s": round(per_s, 1),
                     "busy_cores": round(per_s * cpu_ms / 1000, 2), "replicas": max(1, math.ceil(cores)),
                     "cores": max(1, math.ceil(cores)) + 1})  # + one core for nginx, PostgreSQL and the system
    return rows


def main() -> dict[str, Any]:
    folder = Path(tempfile.mkdtemp(prefix="prefill-lab-replicas-"))
    with Cluster() as cluster:
        results = [measure(n, cluster.url(cluster.database()), folder) for n in (1, 2)]
    one, two = results
    ratio = round(two["sessions_per_s"] / one["sessions_per_s"], 2) if one["sessions_per_s"] else None
    cpu_ms = max(r["cpu_ms_per_session"] for r in results)
    table = plan(cpu_ms)
    key = {"one_replica_sessions_per_s": one["sessions_per_s"], "two_replicas_sessions_per_s": two["sessions_per_s"],
           "ratio": ratio, "cpu_ms_per_session": cpu_ms, "cores": os.cpu_count(),
           "goal_met": ratio is not None and ratio >= 1.6}
    for row in table:
        print(f"  {row['arrivals_per_minute']:>6} arrivals/min = {row['sessions_per_s']}/s: {row['busy_cores']} busy "
              f"cores; {row['replicas']} replicas on {row['cores']} cores")
    return finish("hosted_replicas", {"rates": RATES, "step_s": STEP_S, "results": results, "plan": table}, key,
                  f"through nginx, new sessions/s at p95 < {P95_GOAL_S} s: one replica {one['sessions_per_s']}, two "
                  f"{two['sessions_per_s']} (x{ratio}; goal >= 1.6x) on {os.cpu_count()} cores; {cpu_ms} ms CPU a "
                  f"session")


if __name__ == "__main__":
    main()
