"""Experiment 4's curve: the default sweep (N = 1, 2, 4, 8; 128-token answers, ~600-token prompts)
on the embedded default with 8 slots (``-np 8 --kv-unified``), repeated; per N the aggregate and
per-stream decode rates and the aggregate prefill rate (min / median / max over the repeats), and
the sweep's wall time against the page's promise of "within two minutes on 2 cores"."""

from __future__ import annotations

import time

from bench.common import finish, spread
from core.backends.connect import Target, open_connection
from core.engine.server import LocalServer
from core.experiments import batch
from core.experiments.base import RunContext
from core.experiments.batch import BatchLevel

REPEATS = 5
LEVELS = batch.Settings().concurrency
FIGURES = ("aggregate_decode_tps", "per_stream_decode_tps", "aggregate_prefill_tps", "itl_p50_ms", "ttft_p50_ms")


def main() -> dict:
    sweeps: list[list[BatchLevel]] = []
    walls = []
    with LocalServer(slots=max(LEVELS)) as server, open_connection(Target("llama", server.url)) as conn:
        for _ in range(REPEATS):
            start = time.perf_counter()
            sweeps.append(list(batch.rounds(RunContext(conn), batch.Settings())))
            walls.append(time.perf_counter() - start)
    errors = [lv.error for sweep in sweeps for lv in sweep if lv.error]
    curve = {n: {name: spread([getattr(lv, name) for sweep in sweeps for lv in sweep if lv.concurrency == n])
                 for name in FIGURES} for n in LEVELS}
    print(f"{'N':>3} {'decode tok/s':>22} {'per stream tok/s':>22} {'prefill tok/s':>22}   (min / median / max)")
    for n, figures in curve.items():
        cells = [f"{s['min']:6.0f} {s['median']:6.0f} {s['max']:6.0f}" for s in
                 (figures["aggregate_decode_tps"], figures["per_stream_decode_tps"], figures["aggregate_prefill_tps"])]
        print(f"{n:>3} " + " ".join(f"{c:>22}" for c in cells))
    first, last = curve[LEVELS[0]], curve[LEVELS[-1]]
    decode_gain = last["aggregate_decode_tps"]["median"] / first["aggregate_decode_tps"]["median"]
    prefill_gain = last["aggregate_prefill_tps"]["median"] / first["aggregate_prefill_tps"]["median"]
    wall = spread(walls)
    print(f"sweep wall time: {wall['min']:.1f} / {wall['median']:.1f} / {wall['max']:.1f} s; errors: {len(errors)}")
    key = {"decode_gain": round(decode_gain, 2), "prefill_gain": round(prefill_gain, 2),
           "sweep_wall_s": wall["median"], "errors": len(errors),
           "goal_met": decode_gain > 1.5 and 0.75 < prefill_gain < 1.25 and wall["max"] < 120 and not errors}
    return finish("batch_curve", {"curve": {str(n): c for n, c in curve.items()}, "sweep_wall_s": wall,
                                  "errors": errors}, key,
                  f"decode {decode_gain:.1f}x from N={LEVELS[0]} to {LEVELS[-1]}, prefill "
                  f"{prefill_gain:.2f}x, sweep {wall['median']:.0f} s (goals: decode > 1.5x, prefill within 25 %, "
                  "< 120 s)")


if __name__ == "__main__":
    main()
