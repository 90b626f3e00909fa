"""Opening the hosted demo under a crowd: N new sessions at once (10, 50, 200), with the repository's deploy
config (`.streamlit/config.toml`: no file watcher, no full collection after each run) side by side with
Streamlit's defaults, in one run.

Each visitor is a protocol-level client (`bench.streamlit_client`): the time from its first request to
its first drawn element and to the end of the first script run (the page is drawn), and whether its
connection is still up 5 s after the last page was drawn. CPU per session is the server process's CPU
time over the burst divided by N. Goal: 50 at once with p95 under 2 s on 2 cores; 200 with no dropped
connection.
"""

from __future__ import annotations

import asyncio
import statistics
from typing import Any

from bench.common import finish
from bench.streamlit_client import STREAMLIT_DEFAULTS, Visitor, app_server, cpu_seconds, load_average

BURSTS = [10, 50, 200]
CONFIGS = {"hosted": [], "streamlit_default": STREAMLIT_DEFAULTS}


def percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))], 3)


async def burst(url: str, n: int) -> dict[str, Any]:
    visitors = [Visitor(url, timeout=180) for _ in range(n)]
    visits = await asyncio.gather(*(v.open() for v in visitors))
    await asyncio.sleep(5)
    alive = await asyncio.gather(*(v.alive() for v in visitors))
    await asyncio.gather(*(v.close() for v in visitors))
    drawn = [v.finished_s for v in visits if v.finished_s is not None and not v.error]
    first = [v.first_delta_s for v in visits if v.first_delta_s is not None and not v.error]
    errors = sorted({v.error for v in visits if v.error})
    return {"n": n, "drawn": len(drawn), "dropped": n - sum(alive), "errors": errors[:3],
            "page_p50_s": percentile(drawn, 0.5), "page_p95_s": percentile(drawn, 0.95),
            "page_max_s": percentile(drawn, 1.0),
            "first_element_p50_s": percentile(first, 0.5), "first_element_p95_s": percentile(first, 0.95)}


def measure(flags: list[str]) -> list[dict[str, Any]]:
    rows = []
    with app_server(flags) as (url, pid):
        asyncio.run(burst(url, 2))  # imports and the first script compile, as on a deploy that has been opened once
        for n in BURSTS:
            load = load_average()
            before = cpu_seconds(pid)
            row = asyncio.run(burst(url, n))
            row["cpu_ms_per_session"] = round((cpu_seconds(pid) - before) * 1000 / n, 1)
            row["load_average_before"] = load
            rows.append(row)
            print(f"  {n:>4} at once: page p50 {row['page_p50_s']} s, p95 {row['page_p95_s']} s, "
                  f"max {row['page_max_s']} s; {row['cpu_ms_per_session']} ms CPU/session; "
                  f"{row['drawn']}/{n} drawn, {row['dropped']} dropped (load {load})", flush=True)
    return rows


def main() -> dict[str, Any]:
    results = {}
    for name, flags in CONFIGS.items():
        print(f"{name}:", flush=True)
        results[name] = measure(flags)
    hosted = {r["n"]: r for r in results["hosted"]}
    default = {r["n"]: r for r in results["streamlit_default"]}
    p95_50 = hosted[50]["page_p95_s"]
    key = {
        "hosted_p95_50_s": p95_50,
        "default_p95_50_s": default[50]["page_p95_s"],
        "hosted_cpu_ms_per_session": statistics.median(r["cpu_ms_per_session"] for r in results["hosted"]),
        "default_cpu_ms_per_session": statistics.median(r["cpu_ms_per_session"] for r in results["streamlit_default"]),
        "hosted_200_dropped": hosted[200]["dropped"],
        "hosted_200_drawn": hosted[200]["drawn"],
        "goal_met": p95_50 is not None and p95_50 < 2.0 and hosted[200]["dropped"] == 0
        and hosted[200]["drawn"] == 200,
    }
    return finish("hosted_load", {"bursts": BURSTS, "configs": {k: v for k, v in CONFIGS.items()},
                                  "results": results}, key,
                  f"50 new sessions at once: p95 {p95_50} s to a drawn page with the deploy config vs "
                  f"{default[50]['page_p95_s']} s with Streamlit's defaults; 200 at once: {hosted[200]['drawn']}/200 "
                  f"drawn, {hosted[200]['dropped']} dropped (goal: p95 < 2 s for 50, none dropped for 200)")


if __name__ == "__main__":
    main()
