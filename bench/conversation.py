"""Experiment 7's default run on the embedded default (SmolLM2-135M, the machine's cores): its wall time (goal:
under 3 minutes on 2 cores, with the load average recorded before and after) and, per strategy, the recomputed
tokens and prefill seconds predicted before the run (`core.experiments.conversation.requests`; the time from
experiment 1's curve measured just before, as the page takes it: `conversation.with_prediction`) against
measured. The run is written as bench/results/conversation_run.json and as the page's recorded sample,
samples/embedded_conversation.json. ``BENCH_SMALL=1`` runs a shorter script
(`SMALL`: 10 rounds, threshold 900) where a loaded machine would take an hour over the default."""

from __future__ import annotations

import os
import time
from dataclasses import asdict

from bench.common import RESULTS, finish
from core.backends.connect import Target, open_connection
from core.engine.server import LocalServer
from core.experiments import conversation as ex
from core.experiments import input_length
from core.experiments.base import RunContext, exported_settings
from core.export import to_json

GOAL_S = 180.0
SMALL = {"conversation_rounds": 10, "threshold": 900}


def main() -> dict:
    with LocalServer() as server, open_connection(Target("local", server.url)) as conn:
        curve = input_length.summarize_input(list(input_length.rounds(RunContext(conn), input_length.Settings())))
        fit = asdict(curve.prefill_curve) if curve.prefill_curve else None
        probe = {"prefill_tps": curve.prefill_tps, "curve": fit}  # experiment 1's median rate and its curve
        load = os.getloadavg()[0]
        scale = SMALL if os.environ.get("BENCH_SMALL") else {}
        settings = ex.with_prediction(ex.Settings(**scale), curve.prefill_curve, curve.prefill_tps, None)
        start = time.perf_counter()
        settings = ex.prepare(settings, conn)
        records = list(ex.rounds(RunContext(conn), settings))
        wall = time.perf_counter() - start
        after = os.getloadavg()[0]
        out = {**conn.describe(), **exported_settings(settings), "load_average": round(load, 1),
               "recorded_with": f"python -m bench conversation ({'BENCH_SMALL' if scale else 'the default run'}) "
                                f"on {os.cpu_count()} cores, "
                                f"load average {load:.1f} before and {after:.1f} after; "
                                "rates from experiment 1 just before"}
        export = to_json(out, {ex.EXPERIMENT.records: records})
    (RESULTS / "conversation_run.json").write_text(export)
    ex.SAMPLE.write_text(export)
    errors = [r.error for r in records if r.error]
    found = ex.summarize(records)
    rows = [{"strategy": s.strategy, "rounds": s.rounds, "recomputed": s.recomputed, "predicted": s.predicted,
             "exact_rounds": s.exact, "seconds": s.seconds, "predicted_seconds": s.predicted_seconds,
             "time_agrees": s.time_agrees} for s in found.values()]
    for row in rows:
        print(row, flush=True)
    pause = {label: (r.ttft_ms, r.recomputed_tokens) for label, r in ex.resumes(records).items()}
    key = {"settings": "small" if scale else "default", "wall_s": round(wall, 1), "load_before": round(load, 2),
           "load_after": round(after, 2),
           "prefill_tps": probe["prefill_tps"], "requests": len(records), "errors": errors,
           "exact": sum(s.exact for s in found.values()), "rounds": sum(s.rounds for s in found.values()),
           "pause": pause, "goal_met": wall < GOAL_S and not errors}
    return finish("conversation", {"strategies": rows, "probe": probe, "spread": ex.PREDICTION_SPREAD}, key,
                  f"{'BENCH_SMALL' if scale else 'default'} run {wall:.0f} s (goal < {GOAL_S:.0f} s) at load "
                  f"{load:.1f}-{after:.1f}; "
                  f"{key['exact']} of {key['rounds']} rounds recomputed exactly the predicted tokens")
