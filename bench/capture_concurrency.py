"""The capture proxy with 200 concurrent long streams: every call forwarded at once and logged (goal: 200 of
200, none held back).

200 agents (a thread and a connection each) post a streaming chat call through the proxy at once. The
upstream (`tests.unit.capture.test_proxy_faults.StallingServer`, real HTTP on 127.0.0.1) sends each stream's
first chunk, then holds every stream open until all 200 have reached it (20 s at most: a stream held back by
the proxy shows as ``held_back``), then ends them. Before the fix httpx's default pool let 100 through and
gave the rest a 504 after 60 s. Recorded: calls forwarded, answered whole, logged; how long until all were
in flight upstream; the whole burst's wall time.
"""

from __future__ import annotations

import json
import os
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx

from bench.common import finish, spread
from core.capture.proxy import CaptureServer
from tests.support.agents import post_at_once
from tests.unit.capture.test_proxy_faults import CHAT, FIRST, REST, StallingServer, _chat, _release_when_all_in

AGENTS = int(os.environ.get("AGENTS", "200"))
REPEATS = int(os.environ.get("REPEATS", "3"))


def burst(folder: Path, repeat: int) -> dict[str, Any]:
    upstream = StallingServer(expected=AGENTS)
    threading.Thread(target=upstream.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    threading.Thread(target=_release_when_all_in, args=(upstream,), daemon=True).start()
    log = folder / f"capture-{repeat}.jsonl"
    start = time.perf_counter()
    try:
        with CaptureServer(upstream.url, log) as proxy:
            answers = post_at_once(proxy.base_url + CHAT, [_chat("together", str(n)) for n in range(AGENTS)], 120)
            all_in = upstream.all_in_at - start
            proxy.in_flight.wait_idle(10)
            logged = proxy.log.count
    finally:
        upstream.all_in.set()
        upstream.shutdown()
        upstream.server_close()
    bodies = [a.content if isinstance(a, httpx.Response) else a for a in answers]
    lines = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
    return {"forwarded": len(upstream.received), "whole": sum(b == FIRST + REST for b in bodies),
            "logged": logged, "log_lines": len(lines), "held_back": upstream.held_back,
            "all_in_flight_s": round(all_in, 2), "wall_s": round(time.perf_counter() - start, 2)}


def main() -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="prefill-lab-bench-") as tmp:
        runs = [burst(Path(tmp), repeat) for repeat in range(REPEATS)]
    for run in runs:
        print(run)
    load = os.getloadavg()[0]
    key = {"agents": AGENTS, "forwarded_min": min(r["forwarded"] for r in runs),
           "logged_min": min(r["log_lines"] for r in runs), "whole_min": min(r["whole"] for r in runs),
           "held_back_max": max(r["held_back"] for r in runs),
           "all_in_flight_s": spread([r["all_in_flight_s"] for r in runs]), "load_average": round(load, 1)}
    every = key["forwarded_min"] == key["logged_min"] == key["whole_min"] == AGENTS
    key["goal_met"] = every and not key["held_back_max"]
    return finish("capture_concurrency", {"repeats": REPEATS, "runs": runs}, key,
                  f"{AGENTS} concurrent long streams through the proxy: {key['forwarded_min']} forwarded, "
                  f"{key['whole_min']} answered whole, {key['logged_min']} logged (worst of {REPEATS}); all in flight "
                  f"upstream after {key['all_in_flight_s']['median']:.1f} s median (load {load:.1f} on "
                  f"{os.cpu_count()} cores)")
