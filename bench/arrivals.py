"""Experiment 8 (requests arriving over time): the default sweep's wall time on the embedded default (goal: under 4
minutes on 2 cores, with the load average recorded), and the client's own delay per request, scheduled to sent, at
rates up to far above the default sweep's highest against a one-slot server on 127.0.0.1 that serves a request in
about 5 ms (goal: p99 under 1 ms below that server's capacity). The sweep is also written as an export,
bench/results/arrivals_sweep.json (the page's recorded sample, samples/embedded_arrivals.json, is one)."""

from __future__ import annotations

import os
import random
import threading
import time

from bench.common import RESULTS, finish, spread, table
from core.backends import LlamaServerBackend
from core.backends.base import ChatRequest
from core.backends.connect import Target, open_connection
from core.engine.server import LocalServer
from core.experiments import arrivals as ar
from core.experiments.base import RunContext, exported_settings
from core.export import to_json
from core.stats import nearest_rank
from tests.support.fake_slot import SlotProcess

SWEEP_GOAL_S, CLIENT_GOAL_MS = 240.0, 1.0
CLIENT_RATES = (3.0, 20.0, 50.0)  # the default sweep's highest, then far above it; the fake serves ~200/s
CLIENT_SECONDS = 1.5


def sweep() -> dict:
    """The default sweep, as `python -m core --only arrivals` runs it."""
    load = os.getloadavg()
    with LocalServer() as server, open_connection(Target("local", server.url)) as conn:
        settings = ar.prepare(ar.Settings(), conn)
        start = time.perf_counter()
        levels = list(ar.rounds(RunContext(conn), settings))
        wall = time.perf_counter() - start
        exported = {**conn.describe(), **exported_settings(settings), "load_average": round(load[0], 1),
                    "recorded_with": "python -m bench arrivals (the default sweep)"}
    (RESULTS / "arrivals_sweep.json").write_text(to_json(exported, {ar.EXPERIMENT.records: levels}))
    for level in levels:
        print(f"{level.rate:5.2f}/s: {level.requests:3} requests, TTFT p50 {level.ttft_p50_ms or 0:8,.0f} ms "
              f"p99 {level.ttft_p99_ms or 0:8,.0f} ms, queue p50 {level.queue_p50_ms or 0:8,.0f} ms, "
              f"client p99 {level.client_p99_ms or 0:6.2f} ms, cut {level.cut}")
    found = ar.conclude(levels, None)
    return {"wall_s": round(wall, 1), "load_before": [round(x, 2) for x in load],
            "load_after": [round(x, 2) for x in os.getloadavg()], "status": found.status,
            "capacity": ar.summarize(levels).capacity if levels else None,  # type: ignore[union-attr]
            "levels": [{k: v for k, v in lv.to_dict().items() if k != "streams"} for lv in levels]}


def client_delay() -> dict:
    """Scheduled -> sent for every request at each rate, against the one-slot fake (a request ~5 ms) in a process of
    its own, so that its threads do not share this client's interpreter lock."""
    rows = {}
    with SlotProcess(prefill_s=0.002, token_s=0.001) as fake, LlamaServerBackend(fake.url) as backend:
        for rate in CLIENT_RATES:
            rows[f"{rate:g}/s"] = _delays(backend, rate)
    return {name: spread(values) | {"p99": nearest_rank(values, 99) or 0.0} for name, values in rows.items()}


def _delays(backend: LlamaServerBackend, rate: float) -> list[float]:
    """One rate's requests on schedule: each one's delay from scheduled to sent, in ms."""
    offsets = ar.schedule(rate, CLIENT_SECONDS if rate > 10 else 20.0, seed=8)
    requests = [ChatRequest([{"role": "user", "content": f"r{i}\nHi."}], max_tokens=4) for i in range(len(offsets))]
    sent, origin, ended = ar.send_on_schedule(backend, requests, offsets, threading.Event(), 10.0)
    records = [ar.split(i, item, origin, None, ended) for i, item in enumerate(sent)]
    return [r.client_ms for r in records if r.client_ms is not None]


def wake_floor(n: int = 200) -> dict:
    """How late a bare thread wakes from a timed wait on this machine now (no HTTP, no client): the floor under
    any client's delay, set by the load on the cores."""
    rng = random.Random(8)
    late = []
    for _ in range(n):
        due = time.perf_counter() + rng.uniform(0.001, 0.02)
        threading.Event().wait(due - time.perf_counter())
        late.append((time.perf_counter() - due) * 1000)
    return spread(late) | {"p99": nearest_rank(late, 99) or 0.0}


def main() -> dict:
    floor = wake_floor()
    delays = client_delay()
    print(table([("bare thread wake-up", floor), *delays.items()], "ms late"))
    found = sweep()
    worst = max(s["p99"] for s in delays.values())
    met = found["wall_s"] < SWEEP_GOAL_S and worst < CLIENT_GOAL_MS
    return finish("arrivals", {"sweep": found, "client_delay_ms": delays, "wake_floor_ms": floor},
                  {"sweep_s": found["wall_s"], "client_p99_ms": worst, "goal_met": met},
                  f"default sweep {found['wall_s']:.0f} s (load {found['load_before'][0]:.1f} -> "
                  f"{found['load_after'][0]:.1f}); client delay p99 {worst:.3f} ms at up to "
                  f"{max(CLIENT_RATES):g} requests/s (a bare thread's wake-up p99 {floor['p99']:.3f} ms)")
