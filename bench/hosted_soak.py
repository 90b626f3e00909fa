"""Memory over a long soak with and without Streamlit's full collection after every script run
(``runner.postScriptGC``), to decide the deploy config on more than a short run.

Both servers run the deploy config (no file watcher); one with the collection on. Visitors come in
waves of 10 at once; each opens the home page, switches to experiment 3 and to the doctor, and
leaves. The server's resident memory is read after every 100 visitors, and again after the session
store's reconnect time (2 minutes) has passed with nobody on the page. Without the after-run
collection Python's own generational collector still runs; the question is whether memory creeps.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from bench.common import finish
from bench.streamlit_client import Visitor, app_server, cpu_seconds, load_average, rss_mb

VISITORS, WAVE, SAMPLE_EVERY, IDLE_S = 1000, 10, 100, 140
CONFIGS = {"gc_off": ["--runner.postScriptGC", "false"], "gc_on": ["--runner.postScriptGC", "true"]}


async def wave(url: str) -> list[bool]:
    return list(await asyncio.wait_for(asyncio.gather(*(one_visit(url) for _ in range(WAVE))), 600))


async def one_visit(url: str) -> bool:
    visitor = Visitor(url, timeout=120)
    visits = [await visitor.open()]
    for page in ("cache", "cache_doctor"):
        visits.append(await visitor.switch(page))
    await visitor.close()
    return all(not v.error for v in visits)


def soak(flags: list[str]) -> dict[str, Any]:
    samples: list[tuple[int, float]] = []
    failed = 0
    with app_server(flags) as (url, pid):
        asyncio.run(one_visit(url))
        load = load_average()
        start, cpu = time.monotonic(), cpu_seconds(pid)
        samples.append((0, round(rss_mb(pid), 1)))
        for done in range(WAVE, VISITORS + 1, WAVE):
            ok = asyncio.run(wave(url))
            failed += ok.count(False)
            if done % SAMPLE_EVERY == 0:
                samples.append((done, round(rss_mb(pid), 1)))
                print(f"  {done:>5} visitors: {samples[-1][1]} MB", flush=True)
        wall, cpu = time.monotonic() - start, cpu_seconds(pid) - cpu
        time.sleep(IDLE_S)
        asyncio.run(one_visit(url))  # a visit lets the session store expire what it kept for reconnects
        idle = round(rss_mb(pid), 1)
    second_half = [mb for n, mb in samples if n >= VISITORS // 2]
    return {"samples_mb": samples, "after_idle_mb": idle, "failed_visits": failed, "wall_s": round(wall, 1),
            "cpu_ms_per_visitor": round(cpu * 1000 / VISITORS, 1), "load_average_before": load,
            "growth_second_half_mb": round(second_half[-1] - second_half[0], 1),
            "peak_mb": max(mb for _, mb in samples)}


def main() -> dict[str, Any]:
    results = {}
    for name, flags in CONFIGS.items():
        print(f"{name}:", flush=True)
        results[name] = soak(flags)
    off, on = results["gc_off"], results["gc_on"]
    key = {
        "gc_off_peak_mb": off["peak_mb"], "gc_on_peak_mb": on["peak_mb"],
        "gc_off_growth_second_half_mb": off["growth_second_half_mb"],
        "gc_on_growth_second_half_mb": on["growth_second_half_mb"],
        "gc_off_after_idle_mb": off["after_idle_mb"], "gc_on_after_idle_mb": on["after_idle_mb"],
        "gc_off_cpu_ms_per_visitor": off["cpu_ms_per_visitor"], "gc_on_cpu_ms_per_visitor": on["cpu_ms_per_visitor"],
    }
    return finish("hosted_soak", {"visitors": VISITORS, "wave": WAVE, "results": results}, key,
                  f"{VISITORS} visitors (3 pages each): peak {off['peak_mb']} MB without the after-run collection vs "
                  f"{on['peak_mb']} MB with it; growth over the second half {off['growth_second_half_mb']} vs "
                  f"{on['growth_second_half_mb']} MB; CPU {off['cpu_ms_per_visitor']} vs {on['cpu_ms_per_visitor']} "
                  "ms per visitor")


if __name__ == "__main__":
    main()
