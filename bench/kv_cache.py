"""Experiment 6 against its prediction: on the embedded default (200-token prompt), for N = 32, 64 and 128
steps, how many times slower the recomputed way wrote the same answer than the cached way, against what the
engine probe's prefill and decode rates predicted just before (`core.experiments.kv_cache.predict`); the goal
is the page's stated spread (`PREDICTION_SPREAD`: within 2x either way). Each run is also written as an export,
bench/results/kv_cache_nN.json (the N = 64 one is the page's recorded sample)."""

from __future__ import annotations

import os
import time

from bench.common import RESULTS, finish
from core.backends.connect import Target, open_connection
from core.engine.probe import measure_speed
from core.engine.server import LocalServer
from core.experiments import kv_cache as kv
from core.experiments.base import RunContext, exported_settings
from core.export import to_json

STEPS = (32, 64, 128)


def main() -> dict:
    rows = []
    with LocalServer(context=4096) as server, open_connection(Target("local", server.url)) as conn:
        for steps in STEPS:
            load = os.getloadavg()[0]
            probe = measure_speed(server.url)  # just before each run: the machine as it is now
            settings = kv.Settings(steps=steps, prefill_tps=probe["prefill_tps"], decode_tps=probe["decode_tps"],
                                   predicted_from="engine probe")
            start = time.perf_counter()
            records = list(kv.rounds(RunContext(conn), kv.prepare(settings, conn)))
            wall = time.perf_counter() - start
            settings_out = {**conn.describe(), **exported_settings(settings), "load_average": round(load, 1),
                            "recorded_with": f"python -m bench kv_cache (N = {steps}), rates from the engine probe"}
            (RESULTS / f"kv_cache_n{steps}.json").write_text(to_json(settings_out, {kv.EXPERIMENT.records: records}))
            found = kv.summarize(records)
            assert found is not None and found.prediction is not None, [r.error for r in records if r.error]
            row = {"steps": steps, "measured": round(found.ratio, 2), "predicted": round(found.prediction.ratio, 2),
                   "agrees": found.prediction.agrees(found.ratio), "passed_10x": found.passed_10x,
                   "predicted_passed_10x": found.prediction.passed_10x, "same_answer": found.same_answer,
                   "first_difference": found.first_difference, "cached_s": round(found.cached_total_ms / 1000, 2),
                   "recomputed_s": round(found.recomputed_total_ms / 1000, 2),
                   "step_r2": round(found.recomputed_per_context.r2, 3) if found.recomputed_per_context else None,
                   "probe": probe, "wall_s": round(wall, 1), "load_before": round(load, 2),
                   "load_after": round(os.getloadavg()[0], 2)}
            rows.append(row)
            print(f"N = {steps:>3}: measured {row['measured']:6.1f}x, predicted {row['predicted']:6.1f}x "
                  f"({'agrees' if row['agrees'] else 'OUTSIDE'}), 10x from N = {row['passed_10x']} "
                  f"(predicted {row['predicted_passed_10x']}), same answer: {row['same_answer']}, "
                  f"R² {row['step_r2']}, {wall:.0f} s, load {load:.1f}", flush=True)
    met = all(r["agrees"] and r["same_answer"] for r in rows)
    key = {"ratios": {r["steps"]: [r["measured"], r["predicted"]] for r in rows}, "goal_met": met}
    line = ", ".join(f"N = {r['steps']}: {r['measured']:.1f}x measured / {r['predicted']:.1f}x predicted"
                     for r in rows)
    return finish("kv_cache", {"runs": rows, "spread": kv.PREDICTION_SPREAD}, key,
                  f"{line} (goal: within {kv.PREDICTION_SPREAD:.0f}x, same answer)")
